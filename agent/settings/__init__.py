"""The typed reader of the TOML config (reader.py), the locator of a key's
line in the file (lines.py) and the error a device's or provider's own
settings raise (errors.py): shared by the config loader and every package
that checks its own table."""
