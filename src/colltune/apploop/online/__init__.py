"""tune online: the application runs once with the layer preloaded (driver), which tries
the family's candidates (candidates) on a share of its calls, minus what the store already
knows (known) or its cost model ranks low (model); what the layer wrote is read as data
(evidence), summed up (summary) and costed against plain runs (cost). tune app reaches this
folder through for_app alone."""
