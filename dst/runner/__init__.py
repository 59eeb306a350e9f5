"""Bulk runs: seeds in batches, worker processes, results and summaries."""
