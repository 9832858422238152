"""The HTML report: sections per suite, rendered from results.json alone."""
