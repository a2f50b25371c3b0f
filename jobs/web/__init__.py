"""The search page `corpusmill serve` answers at / (search.html: no build step, no outside resources)."""
