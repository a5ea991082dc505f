"""Formal checks beside the state machines: CrossHair over the contracts and over pairs of
reference and optimized helpers, and the mutation tool that measures the suite. Development
tools only: nothing in the oracle or the command line imports this package."""
