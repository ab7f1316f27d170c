"""How a preprocess run is run: which Beam runner and how many workers (`runners`), the local
worker processes (`beam_worker`), our fixed DaskRunner (`dask_runner`), live progress
(`progress`) and the launcher's reachability check of remote locations (`reach`)."""
