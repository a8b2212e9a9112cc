"""fairseq tasks of the plugin; importing a module registers it.

``systematicity`` is the task, ``systematicity_lm`` its decoder-only form on lm-format data
(decoding in ``prompt_decoding``) and ``packed`` its packed runs (``packed_systematicity``);
``packed_runs`` holds the pack description and the unpacking, ``seeding`` the CPU seeding
patch that the tasks install (neither registers anything). :func:`fairseq_entropy.register`
imports the three task modules; the package itself imports none, so that the command line
reads pack descriptions (``packed_runs``) without importing fairseq.
"""

