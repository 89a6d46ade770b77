"""Contracts of the transpose ops."""

CONTRACTS = ()
