"""Built-in generated data (no download): reverse sequences, synthetic reviews, number pairs, a grammar corpus."""
