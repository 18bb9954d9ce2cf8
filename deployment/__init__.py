"""Deployment estimates: weight memory, devices and a decode lower bound per quantization format (``w8a8 estimate``)."""
