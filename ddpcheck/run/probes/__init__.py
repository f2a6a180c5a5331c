"""One module per runtime invariant: capture in each rank (`install`) and judgement across ranks
(`judge`, torch-free, in the launcher). The interface is described in ddpcheck/run/bootstrap.py."""
