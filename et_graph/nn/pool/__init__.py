from .cls_pool import CLSGraph, CLSPool, add_cls_nodes, graph_sizes

__all__ = ["CLSGraph", "CLSPool", "add_cls_nodes", "graph_sizes"]
