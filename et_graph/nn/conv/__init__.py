from .et_conv import ETConv

__all__ = ["ETConv"]
