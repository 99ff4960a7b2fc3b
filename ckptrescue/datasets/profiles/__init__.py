"""Shard profiles against a baseline: content corruption whose bytes verify (issue 18).

Public API (import the module; nothing heavy is imported here):

* :func:`ckptrescue.datasets.profiles.build.profile_shard` -> ``ShardProfile``
* :func:`ckptrescue.datasets.profiles.build.profile_dataset` -> ``DatasetProfile`` (threads or Dask)
* :func:`ckptrescue.datasets.profiles.profile.load` / ``save`` / ``DatasetProfile.to_json``: versioned JSON
* :func:`ckptrescue.datasets.profiles.compare.compare` -> ``CompareResult`` (findings DP001-DP049)
* :func:`ckptrescue.datasets.profiles.spotcheck.sample_records` -> ``SpotCheck``

See docs/profiles.md.
"""
