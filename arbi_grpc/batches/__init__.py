"""Durable Files and Batches: the data directory's store and the runner of batch lines."""
