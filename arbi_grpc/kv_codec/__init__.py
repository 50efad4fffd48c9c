"""TKV: arbi-serve's 2-8 bit asymmetric KV-cache codec (torch reference), its calibration and bundle format.

Pipeline per K/V head vector: normalized Hadamard rotation, calibrated per-channel shift and scale, grouped
asymmetric quantization with dense bit packing; each sequence's first tokens (the attention sink) stay fp16.
See docs/tkv.md for the layout, the attention trick and the quality study.
"""

from arbi_grpc.kv_codec.attention import rotated_space_attention, tkv_attention
from arbi_grpc.kv_codec.attention_transforms import transform_output, transform_queries
from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration
from arbi_grpc.kv_codec.calibration.channel_transforms import (
    CALIBRATION_METHODS,
    calibrate_channels,
    calibrate_tkv,
    query_channel_weights,
)
from arbi_grpc.kv_codec.calibration.fingerprint import model_dir_fingerprint, model_fingerprint
from arbi_grpc.kv_codec.codec import ChannelTransform, TkvLayerCodec
from arbi_grpc.kv_codec.hadamard import hadamard_matrix, hadamard_rotate, rotation_block_size
from arbi_grpc.kv_codec.packing import pack_codes, packed_width, unpack_codes
from arbi_grpc.kv_codec.paged_cache import TkvLayerStorage, TkvPagedKVCache
from arbi_grpc.kv_codec.quantize import QuantizedGroups, dequantize_groups, quantize_groups
from arbi_grpc.kv_codec.spec import (
    SUPPORTED_BITS,
    TkvSpec,
    bytes_per_token,
    head_vector_bytes,
    sink_bytes_per_sequence,
    validate_bits,
)
from arbi_grpc.kv_codec.torch_attention import TkvTorchPagedAttention

__all__ = [
    "CALIBRATION_METHODS",
    "ChannelTransform",
    "SUPPORTED_BITS",
    "QuantizedGroups",
    "TkvCalibration",
    "TkvLayerCodec",
    "TkvLayerStorage",
    "TkvPagedKVCache",
    "TkvSpec",
    "TkvTorchPagedAttention",
    "bytes_per_token",
    "calibrate_tkv",
    "calibrate_channels",
    "dequantize_groups",
    "hadamard_matrix",
    "hadamard_rotate",
    "head_vector_bytes",
    "model_dir_fingerprint",
    "model_fingerprint",
    "pack_codes",
    "packed_width",
    "quantize_groups",
    "query_channel_weights",
    "rotated_space_attention",
    "rotation_block_size",
    "sink_bytes_per_sequence",
    "tkv_attention",
    "transform_output",
    "transform_queries",
    "unpack_codes",
    "validate_bits",
]
