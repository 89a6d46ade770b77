"""Contracts of the self-test ops."""

CONTRACTS = ()
