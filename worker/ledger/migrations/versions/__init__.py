"""Ledger schema revisions, applied in order by Alembic."""
