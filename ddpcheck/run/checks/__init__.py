"""One module per runtime check code (metadata and docs only, no torch). Discovered automatically."""
