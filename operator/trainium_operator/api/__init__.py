"""The API vocabulary: the CRD (one source), the typed spec, names and the instance table."""
