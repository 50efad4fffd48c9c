"""The block tables benchmarks/gpu_decode.py times decode graphs over: each first block among the ids that may
start a sequence (a TKV cache has sink rows for those alone), the rest of a table outside them."""

import pytest

from benchmarks.gpu_decode import graph_step_block_tables


def test_first_blocks_are_sink_blocks_and_the_rest_are_not():
    tables = graph_step_block_tables(num_blocks=200, num_first_blocks=25, batch=64, blocks_per_seq=144)
    assert len(tables) == 64 and all(len(table) == 144 for table in tables)
    assert all(table[0] < 25 for table in tables)
    assert all(block >= 25 for table in tables for block in table[1:])
    assert all(block < 200 for table in tables for block in table)
    assert len({table[0] for table in tables}) == 25  # spread over every first block


def test_a_cache_without_first_block_limits_gets_consecutive_runs():
    assert graph_step_block_tables(num_blocks=10, num_first_blocks=10, batch=3, blocks_per_seq=4) == [
        [0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]


@pytest.mark.parametrize("num_first_blocks", [0, 11])
def test_first_block_counts_outside_the_pool_are_refused(num_first_blocks):
    with pytest.raises(ValueError):
        graph_step_block_tables(num_blocks=10, num_first_blocks=num_first_blocks, batch=1, blocks_per_seq=2)
