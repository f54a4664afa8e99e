"""Optimization passes; importing this package registers them."""
