"""The page lists the FlashInfer backend hands its wrappers: each sequence's pages, read from its padded block
table, in FlashInfer's CSR form (computed on the host; no flashinfer needed)."""

from __future__ import annotations

import torch

from arbi_grpc.attention.flashinfer_paged import PageLists
from arbi_grpc.attention.metadata import AttentionMetadata


def test_page_lists_follow_each_block_table_up_to_its_context() -> None:
    block_size = 4
    # Contexts: a partial last page, an exact multiple of the block size, a single token, a longer table than needed.
    query_lens = [3, 1, 1, 5]
    seq_lens = [7, 8, 1, 9]
    tables = [[9, 2], [5, 0], [11], [3, 7, 1, 6]]
    metadata = AttentionMetadata.build(query_lens=query_lens, seq_lens=seq_lens, block_tables=tables,
                                       block_size=block_size)

    pages = PageLists.of(metadata, block_size)

    assert pages.query_indptr.tolist() == [0, 3, 4, 5, 10]
    assert pages.page_indptr.tolist() == [0, 2, 4, 5, 8]
    assert pages.page_ids.tolist() == [9, 2, 5, 0, 11, 3, 7, 1]
    assert pages.last_page_len.tolist() == [3, 4, 1, 1]
    assert pages.seq_lens.tolist() == seq_lens
    assert {t.dtype for t in (pages.query_indptr, pages.page_indptr, pages.page_ids, pages.last_page_len)} == {
        torch.int32}  # FlashInfer builds its kernels for int32 indices
