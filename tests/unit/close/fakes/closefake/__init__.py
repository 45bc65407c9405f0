"""A fake task for the close tests: deterministic predictions without torch."""
