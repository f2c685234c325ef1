from endpoint.server_info import identity
from endpoint.server_metrics import CACHE_INFO, ITER_TOKENS, RUNNING, parse

TEXT = '''# HELP vllm:num_requests_running Number of requests
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:cache_config_info{block_size="128",num_gpu_blocks="182",note="a \\"quoted\\" label"} 1.0
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="m"} 4.0
vllm:iteration_tokens_total_bucket{engine="0",le="512.0",model_name="m"} 6.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="m"} 7.0
vllm:iteration_tokens_total_count{engine="0",model_name="m"} 7.0
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 1530.0
garbage line
'''


def test_parse_gauges_info_and_histograms():
    m = parse(TEXT)
    assert m.value(RUNNING) == 3.0
    assert m.value(("sglang:num_running_reqs",)) is None
    info = m.labels(CACHE_INFO)
    assert info["block_size"] == "128" and info["num_gpu_blocks"] == "182"
    count, total, buckets = m.histogram(ITER_TOKENS)
    assert (count, total) == (7.0, 1530.0)
    assert buckets == [(1.0, 4.0), (512.0, 6.0), (float("inf"), 7.0)]


def test_identity_of_a_server(fake_server):
    ident = identity(fake_server)
    assert ident["version"] == "fake-1" and ident["engine"] == "vllm"
    assert ident["models"][0]["id"] == "fake" and ident["cache_config"]["block_size"] == "16"
    assert identity("http://127.0.0.1:9")["metrics"] is False
