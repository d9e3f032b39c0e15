"""Working from a laptop through the site's login node (docs/laptop.md).

``submit`` on a site with ``login:`` takes the code snapshot here, uploads the files the login
node's upload store lacks (:mod:`clusterkit.remote.upload`), and runs ``clusterkit submit`` on the
login node over SSH (:mod:`clusterkit.remote.flow`); the laptop keeps a record of the job with
the cluster's job id and the login node it went through (:mod:`clusterkit.remote.records`), and
``status``, ``logs``, ``cancel`` and ``doctor`` of such a job run the same command there.
"""
