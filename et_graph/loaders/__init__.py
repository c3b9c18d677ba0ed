"""Mini-batch loaders: neighbour sampling (built-in, or PyG's ``NeighborLoader`` when pyg-lib or
torch-sparse is installed)."""
from .neighbour_sampling import (
    SAMPLERS,
    NeighbourSampler,
    PygNeighbourSampler,
    SampledBatch,
    make_sampler,
    parse_fanouts,
    pyg_sampler_available,
    resolve_sampler,
)

__all__ = [
    "SAMPLERS",
    "NeighbourSampler",
    "SampledBatch",
    "parse_fanouts",
    "PygNeighbourSampler",
    "make_sampler",
    "pyg_sampler_available",
    "resolve_sampler",
]
