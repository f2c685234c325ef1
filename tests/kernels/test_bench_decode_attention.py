"""The decode-attention benchmark measures against the card's own bandwidth, not an H100's."""

import pytest

from kernels.bench_decode_attention import catalog_hbm_gbps


@pytest.mark.parametrize("name, gbps", [("NVIDIA H200", 4800.0), ("NVIDIA H100 80GB HBM3", 3350.0)])
def test_bandwidth_is_the_catalogs_for_the_card(name, gbps):
    assert catalog_hbm_gbps(name) == gbps


@pytest.mark.parametrize("name", ["NVIDIA H100 PCIe", "Tesla T4"])
def test_a_card_the_catalog_lacks_has_no_default(name):
    assert catalog_hbm_gbps(name) is None
