"""Starting clusters: ``LocalCluster`` (``local``) and the lifeline that ends its
processes with their starter (``lifeline``)."""
