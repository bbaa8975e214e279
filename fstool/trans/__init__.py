"""Transactions, delayed logging (checkpoints) and the log writer."""
from .journal import Journal
from .trans import Transaction

__all__ = ["Journal", "Transaction"]
