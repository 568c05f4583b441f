"""p4ina's controller: topology, routing, aggregation-tree planning and P4Runtime installation."""
