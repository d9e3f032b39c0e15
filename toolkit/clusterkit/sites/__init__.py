"""Site lifecycle for HPC admins: ``sites init`` writes a site config from the live cluster,
``sites drift`` compares site configs with it (and ``--write`` puts the facts back).

Slurm facts come through one seam (:func:`clusterkit.sites.facts.run_slurm`: three scontrol
calls, one per kind); node facts through preflight's transports and parsers.
"""
