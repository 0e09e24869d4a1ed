"""Studies, kept as evidence: each compares a model of snapeval (the simulator, a statistic) with published or measured
figures and writes what it found under results/bench/ (the docs cite those files). Not benchmarks of the code's
speed (``benchmarks/``) and not product (``snapeval``); each enters snapeval through public names."""
