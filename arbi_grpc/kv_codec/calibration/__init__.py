"""TKV calibration: a model's keys and values collected over calibration text, per-channel transforms and per-layer
bits fitted to them, the bundle that stores them for one model fingerprint, and the bundle an engine serves with
(loaded at boot or reloaded while it runs).
"""
