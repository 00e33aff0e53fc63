"""What every component shares, below all of them (a component imports this, never a sibling):
the record layout (records.py), the model layout (model.py: serving_dir, the blessing files,
is_blessed), the logged-feedback loader (feedback.py), stable record keys (record_keys.py) and the
artifact and parameter keys (keys.py)."""
