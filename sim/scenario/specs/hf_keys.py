"""Which keys of a Hugging Face ``config.json`` servesim reads, which it knows do not change a
model's memory or cost, and which model types it understands. A key in none of these lists may
change the cost, so a config that has one is refused by name rather than guessed at."""

from __future__ import annotations

# Model types read (the wrappers' language model: text_config). None: a config without one, read
# as a Llama-style decoder.
MODEL_TYPES = {
    None: "Llama-style decoder",
    "llama": "Llama 2/3/3.1/3.3", "mistral": "Mistral / Mistral-Small", "mixtral": "Mixtral",
    "qwen2": "Qwen2/2.5", "qwen2_moe": "Qwen2-MoE", "qwen3": "Qwen3", "qwen3_moe": "Qwen3-MoE",
    "qwen3_next": "Qwen3-Next", "deepseek_v2": "DeepSeek-V2", "deepseek_v3": "DeepSeek-V3/R1",
    "kimi_k2": "Kimi-K2", "glm4_moe": "GLM-4.5", "gpt_oss": "gpt-oss", "gemma2": "Gemma-2",
    "gemma3_text": "Gemma-3", "gemma3": "Gemma-3 (multimodal)", "phi3": "Phi-3/4", "llama4_text": "Llama-4",
    "llama4": "Llama-4 (multimodal)", "mistral3": "Mistral-Small-3.1 (multimodal)", "nemotron_h": "Nemotron-H",
}
WRAPPERS = {"gemma3", "llama4", "mistral3"}  # multimodal: the language model is text_config

# Keys the reader uses (somewhere in hf_config.py).
READ = {
    "model_type", "architectures", "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
    "vocab_size", "num_key_value_heads", "head_dim", "max_position_embeddings", "tie_word_embeddings",
    "rope_theta", "rms_norm_eps", "torch_dtype", "dtype", "num_local_experts", "num_experts",
    "num_experts_per_tok", "experts_per_token", "_name_or_path", "text_config", "vision_config",
    "quantization_config", "sliding_window", "sliding_window_pattern", "layer_types", "use_sliding_window",
    "max_window_layers", "attention_chunk_size", "no_rope_layers", "interleave_moe_layer_step", "moe_layers",
    "intermediate_size_mlp", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
    "v_head_dim", "first_k_dense_replace", "moe_layer_freq", "n_routed_experts", "n_shared_experts",
    "moe_intermediate_size", "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers",
    "num_nextn_predict_layers", "full_attention_interval", "linear_num_key_heads", "linear_num_value_heads",
    "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "attn_output_gate",
    "hybrid_override_pattern", "attention_head_dim", "mamba_num_heads", "mamba_head_dim", "ssm_state_size",
    "n_groups", "conv_kernel", "expand", "mlp_hidden_act", "hidden_act", "hidden_activation",
    "layer_norm_epsilon",
}

# Keys that do not change memory or cost as servesim models them (token ids, generation
# defaults, training-only settings, numerics inside an operation, positional-encoding details,
# biases and per-head norms: under 0.1% of the parameters).
IGNORED = {
    # identity, tokens, generation, training
    "auto_map", "transformers_version", "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id",
    "decoder_start_token_id", "initializer_range", "use_cache", "output_router_logits", "router_aux_loss_coef",
    "aux_loss_alpha", "seq_aux", "router_jitter_noise", "attention_dropout", "hidden_dropout", "ep_size",
    "pretraining_tp", "tokenizer_class", "num_logits_to_keep", "return_dict", "output_attentions",
    "output_hidden_states", "torchscript", "use_bfloat16", "tie_encoder_decoder", "is_decoder",
    "is_encoder_decoder", "add_cross_attention", "prefix", "problem_type", "finetuning_task", "id2label",
    "label2id", "task_specific_params", "bad_words_ids", "begin_suppress_tokens", "suppress_tokens",
    "chunk_size_feed_forward", "cross_attention_hidden_size", "diversity_penalty", "do_sample",
    "early_stopping", "encoder_no_repeat_ngram_size", "exponential_decay_length_penalty", "forced_bos_token_id",
    "forced_eos_token_id", "length_penalty", "max_length", "min_length", "no_repeat_ngram_size", "num_beam_groups",
    "num_beams", "num_return_sequences", "output_scores", "pruned_heads", "remove_invalid_values",
    "repetition_penalty", "return_dict_in_generate", "temperature", "tf_legacy_loss", "top_k", "top_p",
    "typical_p", "initial_context_length", "cache_implementation",
    # positional encoding and numerics within an operation
    "rope_scaling", "rope_parameters", "partial_rotary_factor", "rope_interleave", "rope_local_base_freq",
    "query_pre_attn_scalar", "final_logit_softcapping", "attn_logit_softcapping", "swiglu_limit",
    "routed_scaling_factor", "scoring_func", "topk_method", "n_group", "topk_group", "norm_topk_prob",
    "use_qk_norm", "attention_bias", "mlp_bias", "use_bias", "use_conv_bias", "mamba_proj_bias", "qkv_bias",
    "time_step_floor", "time_step_limit", "time_step_max", "time_step_min", "time_step_rank",
    "rescale_prenorm_residual", "residual_in_fp32", "use_mamba_kernels", "mamba_hidden_act", "chunk_size",
    "original_max_position_embeddings", "resid_pdrop", "embd_pdrop", "attention_logit_softcapping",
    # multimodal wrappers: the vision tower is not modelled (said in the model's notes)
    "image_token_index", "image_token_id", "boi_token_index", "eoi_token_index", "mm_tokens_per_image",
    "multimodal_projector_bias", "projector_hidden_act", "spatial_merge_size", "vision_feature_layer",
    "vision_feature_select_strategy", "image_seq_length",
}
