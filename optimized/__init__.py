"""Mutable and fast; same interface as reference/, KV in torch tensors."""
