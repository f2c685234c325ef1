"""The scenario: its schema (``schema``), the model and GPU catalogs (``specs``), the KV memory
budget a replica gets (``memory``) and the embedded default scenario (``data/``)."""
