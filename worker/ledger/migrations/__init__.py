"""Alembic migrations of the ledger (a package so that they ship in the wheel)."""
