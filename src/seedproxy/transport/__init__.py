"""The one HTTP seam between the proxy and its upstreams, and the one map from a
transport failure to its status."""
