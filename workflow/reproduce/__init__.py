"""The reproduction of the papers' figures and claims with dpaudit: not part of the installed library.

This package lives beside the Snakemake rules that use it (``workflow/``) and is not in the wheel: the Snakefile
puts ``workflow/`` on ``sys.path`` (and on ``PYTHONPATH`` for its jobs), and the tests do the same through
pytest's ``pythonpath``. It imports :mod:`dpaudit` freely; :mod:`dpaudit` never imports it.

* :mod:`reproduce.cli` — the pipeline commands, ``python -m reproduce <command>`` (figure, manifest, summarize,
  summarize-run, audit-table, validation, validation-run, ladder, batch, list).
* :mod:`reproduce.figures` — each paper's figures and tables (``FIGURE_SPECS``), their claims and verdicts.
* :mod:`reproduce.experiments` — the paper experiments of ``params.yaml``, planned into runs; reading run summaries.
* :mod:`reproduce.results` — metrics, tables and the gallery collected from the pipeline's runs.
* :mod:`reproduce.pipeline_config` — the cross-field checks of ``params.yaml`` before any job.
* :mod:`reproduce.dpsgd_dc_curves` — the DPSGD-GC/DC paper's Figs. 2b/3b as curves.
"""
