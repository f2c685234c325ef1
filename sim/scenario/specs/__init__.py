"""Catalogs of model architectures and GPUs."""

from sim.scenario.specs.catalog import MODEL_CATALOG, get_model
from sim.scenario.specs.gpus import GPU_CATALOG, GpuSpec, get_gpu
from sim.scenario.specs.hf_config import model_from_hf_config
from sim.scenario.specs.models import ModelSpec

__all__ = [
    "GPU_CATALOG",
    "MODEL_CATALOG",
    "GpuSpec",
    "ModelSpec",
    "get_gpu",
    "get_model",
    "model_from_hf_config",
]
