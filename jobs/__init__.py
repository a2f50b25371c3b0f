"""corpusmill: notes (Markdown, Excel) into retrieval-ready chunks and vectors."""

__version__ = "0.1.0"

# Bumped whenever a code change alters chunk output for the same config, so that the
# pipeline fingerprint (and with it every document's checkpoint) is invalidated.
PIPELINE_VERSION = "1"
