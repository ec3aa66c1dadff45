"""The management cabinet: organizations, users, keys, billing records and their storage."""
