"""The kvpress presses every method-level test runs (as kvpress's own tests/default_presses.py does for its presses):
representative scorers, attention-based and not, each with the arguments a user would pass."""

DEFAULT_PRESSES = [
    ("kvpress:SnapKVPress", {"window_size": 8, "kernel_size": 3}),
    ("kvpress:StreamingLLMPress", {"n_sink": 4}),
    ("kvpress:TOVAPress", {}),
    ("kvpress:KnormPress", {}),
    ("kvpress:ExpectedAttentionPress", {"n_future_positions": 32}),
    ("kvpress:PyramidKVPress", {"window_size": 8}),
    ("kvpress:RandomPress", {"seed": 0}),
]
