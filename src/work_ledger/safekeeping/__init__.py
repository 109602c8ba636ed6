"""Safekeeping: backup and restore of the whole ledger, and an export for the long term."""
