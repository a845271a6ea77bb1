"""The test lanes: which tests are slow, declared once (``conftest.py`` marks them ``slow``).

``python -m pytest -m "not slow"`` is the fast lane a contributor runs in a loop; ``python -m pytest``
(CI) runs everything. Slow are the tests that spend seconds each in other processes or whole sweeps:
SIGKILL sweeps and live readers against writers, fault injection along whole stages, fuzzed and hostile
folder sweeps, every start method of the loader workers, the browser, Ray, torch.distributed, benchmark smoke
runs, the examples and the README's snippets. Each module's behaviour stays in the fast lane through its
other tests. ``tests/test_lanes.py`` checks that every name here still names a test.
"""

# whole modules (paths from the project root)
SLOW_MODULES = frozenset({
    "tests/test_live.py",
    "tests/test_benchmarks.py",
    "tests/test_faults.py",
    "tests/test_examples.py",
    "tests/test_readme.py",
    "tests/test_snippet_runner.py",
    "tests/test_docs.py",
    "tests/test_types.py",
    "tests/core/test_crash.py",
    "tests/core/test_encoded_crash.py",
    "tests/core/test_encoded_live.py",
    "tests/views/test_resume_kill.py",
    "tests/distributed/test_ray_shards.py",
    "tests/distributed/test_ddp.py",
    "tests/sharing/test_viewer_browser.py",
})

# single tests (node ids without their parameters: every parameter set is slow)
SLOW_TESTS = frozenset({
    "tests/core/test_grow.py::test_a_grow_killed_at_any_step_leaves_every_episode",
    "tests/core/test_store.py::test_readers_open_cleanly_while_a_ring_writer_commits",
    "tests/test_folder_trust.py::test_hostile_folder",
    "tests/test_folder_trust.py::test_fuzzed_folders_raise_only_library_errors",
    "tests/sharing/test_verify.py::test_cli_on_every_damage_kind",
    "tests/sharing/test_pack.py::test_pack_fault_injection",
    "tests/sharing/test_pack.py::test_unpack_fault_injection",
    "tests/sharing/test_merge.py::test_a_merge_killed_at_any_instant_leaves_no_output_or_a_whole_one",
    "tests/sharing/test_split.py::test_a_split_killed_at_any_instant_leaves_each_output_absent_or_whole",
    "tests/distributed/test_shards.py::test_a_resumed_sharded_sampler_serves_its_draws_ahead",
    "tests/distributed/test_shards.py::test_prioritized_across_shards_matches_one_store",
    "tests/distributed/test_shards.py::test_a_reader_follows_writers_while_they_write",
    "tests/distributed/test_shards.py::test_uniform_across_shards_is_uniform_over_every_position",
    "tests/distributed/test_shards.py::test_several_writers_at_once_and_one_reader_over_all",
    "tests/views/test_transforms.py::test_transforms_run_in_the_dataloader_workers",
    "tests/views/test_loader.py::test_workers_under_every_start_method",
    "tests/views/test_cold.py::test_cold_batches_are_byte_identical_to_warm_ones",
    "tests/samplers/test_kernels.py::test_no_writable_cache_directory_breaks_nothing",
    "tests/samplers/test_orders.py::test_a_block_shuffle_is_a_permutation_and_any_slicing_gives_the_same_order",
    "tests/samplers/test_samplers.py::test_random_operations_never_draw_a_dead_position",
    "tests/interop/test_interop_mrb.py::test_a_field_name_that_is_no_file_name_is_refused_before_any_file_opens",
    "tests/interop/test_interop_mrb.py::test_the_commands_import_and_export_package_folders",
    "tests/interop/test_interop_d4rl.py::test_import_and_export_commands",
    "tests/interop/test_interop_minari.py::test_the_commands",
    "tests/views/test_transport.py::test_slots_under_every_start_method",
    "tests/sharing/test_viewer.py::test_a_table_of_many_episodes_pages_without_reading_rows",
    "tests/distributed/test_ratelimit.py::test_two_actors_and_a_learner_in_other_processes_keep_the_ratio",
    # the loader contract again, with two worker processes for each of the 18 samplers
    "tests/samplers/test_samplers.py::TestSamplerContract::test_worker_processes_give_the_sampler_draws",
    # a worker killed: torch's loader notices it at its next status check, 5 s later
    "tests/views/test_transport.py::test_a_killed_worker_is_reported_and_leaks_nothing",
    # the browser
    "tests/sharing/test_viewer_report.py::test_the_report_in_a_browser",
    # commands and imports as a user runs them, a Python process each (the fast lane runs the same commands
    # through main(), and its other tests of these modules start a process or two)
    "tests/sharing/test_verify.py::test_cli_usage_errors_and_paths_that_are_not_stores",
    "tests/sharing/test_frames.py::test_cli_as_a_user_runs_it",
    "tests/sharing/test_card.py::test_cli_card",
    "tests/cli/test_cli.py::test_torch_names_load_on_first_use",
    "tests/samplers/test_kernels.py::test_importing_never_imports_numba_and_the_variable_is_read_at_first_use",
})


def is_slow(nodeid: str) -> bool:
    """Whether the test of this node id (``path::name[params]``) is in the slow lane."""
    path, _, name = nodeid.partition("::")
    return path in SLOW_MODULES or f"{path}::{name.split('[')[0]}" in SLOW_TESTS
