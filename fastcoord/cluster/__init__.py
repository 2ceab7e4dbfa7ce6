"""Several fastcoord nodes as one cluster: who owns what, and the supervisor of one machine's."""
