package com.arbi.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 * <pre>
 * AdminService inspects and operates a running server: what it serves, its health and memory, the
 * requests in flight, its runtime settings, and the resident model.
 * Every RPC needs the admin credential in the metadata `authorization: Bearer &lt;admin token&gt;`. The
 * server mints the token on first boot into a file readable only by its owner (`admin-token` under the
 * cache directory) unless one is configured. Without a credential, or with a wrong one, a call fails with
 * UNAUTHENTICATED; with the generate token (a valid credential without admin rights) it fails with
 * PERMISSION_DENIED.
 * Errors are `google.rpc.Status` values with a canonical code and an `ErrorInfo` detail (domain
 * "arbi-serve"); INVALID_ARGUMENT also carries a `BadRequest` naming the field. Each RPC lists its codes
 * besides UNAUTHENTICATED and PERMISSION_DENIED, which every RPC may return.
 * </pre>
 */
@javax.annotation.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: arbi/v1/admin_service.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class AdminServiceGrpc {

  private AdminServiceGrpc() {}

  public static final String SERVICE_NAME = "arbi.v1.AdminService";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.GetServerInfoRequest,
      com.arbi.v1.GetServerInfoResponse> getGetServerInfoMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "GetServerInfo",
      requestType = com.arbi.v1.GetServerInfoRequest.class,
      responseType = com.arbi.v1.GetServerInfoResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.GetServerInfoRequest,
      com.arbi.v1.GetServerInfoResponse> getGetServerInfoMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.GetServerInfoRequest, com.arbi.v1.GetServerInfoResponse> getGetServerInfoMethod;
    if ((getGetServerInfoMethod = AdminServiceGrpc.getGetServerInfoMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getGetServerInfoMethod = AdminServiceGrpc.getGetServerInfoMethod) == null) {
          AdminServiceGrpc.getGetServerInfoMethod = getGetServerInfoMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.GetServerInfoRequest, com.arbi.v1.GetServerInfoResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "GetServerInfo"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.GetServerInfoRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.GetServerInfoResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("GetServerInfo"))
              .build();
        }
      }
    }
    return getGetServerInfoMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.CheckLivenessRequest,
      com.arbi.v1.CheckLivenessResponse> getCheckLivenessMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "CheckLiveness",
      requestType = com.arbi.v1.CheckLivenessRequest.class,
      responseType = com.arbi.v1.CheckLivenessResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.CheckLivenessRequest,
      com.arbi.v1.CheckLivenessResponse> getCheckLivenessMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.CheckLivenessRequest, com.arbi.v1.CheckLivenessResponse> getCheckLivenessMethod;
    if ((getCheckLivenessMethod = AdminServiceGrpc.getCheckLivenessMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getCheckLivenessMethod = AdminServiceGrpc.getCheckLivenessMethod) == null) {
          AdminServiceGrpc.getCheckLivenessMethod = getCheckLivenessMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.CheckLivenessRequest, com.arbi.v1.CheckLivenessResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "CheckLiveness"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.CheckLivenessRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.CheckLivenessResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("CheckLiveness"))
              .build();
        }
      }
    }
    return getCheckLivenessMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.CheckReadinessRequest,
      com.arbi.v1.CheckReadinessResponse> getCheckReadinessMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "CheckReadiness",
      requestType = com.arbi.v1.CheckReadinessRequest.class,
      responseType = com.arbi.v1.CheckReadinessResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.CheckReadinessRequest,
      com.arbi.v1.CheckReadinessResponse> getCheckReadinessMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.CheckReadinessRequest, com.arbi.v1.CheckReadinessResponse> getCheckReadinessMethod;
    if ((getCheckReadinessMethod = AdminServiceGrpc.getCheckReadinessMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getCheckReadinessMethod = AdminServiceGrpc.getCheckReadinessMethod) == null) {
          AdminServiceGrpc.getCheckReadinessMethod = getCheckReadinessMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.CheckReadinessRequest, com.arbi.v1.CheckReadinessResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "CheckReadiness"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.CheckReadinessRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.CheckReadinessResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("CheckReadiness"))
              .build();
        }
      }
    }
    return getCheckReadinessMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.ListModelsRequest,
      com.arbi.v1.ListModelsResponse> getListModelsMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListModels",
      requestType = com.arbi.v1.ListModelsRequest.class,
      responseType = com.arbi.v1.ListModelsResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.ListModelsRequest,
      com.arbi.v1.ListModelsResponse> getListModelsMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.ListModelsRequest, com.arbi.v1.ListModelsResponse> getListModelsMethod;
    if ((getListModelsMethod = AdminServiceGrpc.getListModelsMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getListModelsMethod = AdminServiceGrpc.getListModelsMethod) == null) {
          AdminServiceGrpc.getListModelsMethod = getListModelsMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.ListModelsRequest, com.arbi.v1.ListModelsResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListModels"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.ListModelsRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.ListModelsResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("ListModels"))
              .build();
        }
      }
    }
    return getListModelsMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.LoadModelRequest,
      com.arbi.v1.LoadModelResponse> getLoadModelMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "LoadModel",
      requestType = com.arbi.v1.LoadModelRequest.class,
      responseType = com.arbi.v1.LoadModelResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.LoadModelRequest,
      com.arbi.v1.LoadModelResponse> getLoadModelMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.LoadModelRequest, com.arbi.v1.LoadModelResponse> getLoadModelMethod;
    if ((getLoadModelMethod = AdminServiceGrpc.getLoadModelMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getLoadModelMethod = AdminServiceGrpc.getLoadModelMethod) == null) {
          AdminServiceGrpc.getLoadModelMethod = getLoadModelMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.LoadModelRequest, com.arbi.v1.LoadModelResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "LoadModel"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.LoadModelRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.LoadModelResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("LoadModel"))
              .build();
        }
      }
    }
    return getLoadModelMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.UnloadModelRequest,
      com.arbi.v1.UnloadModelResponse> getUnloadModelMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "UnloadModel",
      requestType = com.arbi.v1.UnloadModelRequest.class,
      responseType = com.arbi.v1.UnloadModelResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.UnloadModelRequest,
      com.arbi.v1.UnloadModelResponse> getUnloadModelMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.UnloadModelRequest, com.arbi.v1.UnloadModelResponse> getUnloadModelMethod;
    if ((getUnloadModelMethod = AdminServiceGrpc.getUnloadModelMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getUnloadModelMethod = AdminServiceGrpc.getUnloadModelMethod) == null) {
          AdminServiceGrpc.getUnloadModelMethod = getUnloadModelMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.UnloadModelRequest, com.arbi.v1.UnloadModelResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "UnloadModel"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.UnloadModelRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.UnloadModelResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("UnloadModel"))
              .build();
        }
      }
    }
    return getUnloadModelMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.SwitchModelRequest,
      com.arbi.v1.SwitchModelResponse> getSwitchModelMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "SwitchModel",
      requestType = com.arbi.v1.SwitchModelRequest.class,
      responseType = com.arbi.v1.SwitchModelResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.SwitchModelRequest,
      com.arbi.v1.SwitchModelResponse> getSwitchModelMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.SwitchModelRequest, com.arbi.v1.SwitchModelResponse> getSwitchModelMethod;
    if ((getSwitchModelMethod = AdminServiceGrpc.getSwitchModelMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getSwitchModelMethod = AdminServiceGrpc.getSwitchModelMethod) == null) {
          AdminServiceGrpc.getSwitchModelMethod = getSwitchModelMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.SwitchModelRequest, com.arbi.v1.SwitchModelResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "SwitchModel"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.SwitchModelRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.SwitchModelResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("SwitchModel"))
              .build();
        }
      }
    }
    return getSwitchModelMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.GetMemoryReportRequest,
      com.arbi.v1.GetMemoryReportResponse> getGetMemoryReportMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "GetMemoryReport",
      requestType = com.arbi.v1.GetMemoryReportRequest.class,
      responseType = com.arbi.v1.GetMemoryReportResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.GetMemoryReportRequest,
      com.arbi.v1.GetMemoryReportResponse> getGetMemoryReportMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.GetMemoryReportRequest, com.arbi.v1.GetMemoryReportResponse> getGetMemoryReportMethod;
    if ((getGetMemoryReportMethod = AdminServiceGrpc.getGetMemoryReportMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getGetMemoryReportMethod = AdminServiceGrpc.getGetMemoryReportMethod) == null) {
          AdminServiceGrpc.getGetMemoryReportMethod = getGetMemoryReportMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.GetMemoryReportRequest, com.arbi.v1.GetMemoryReportResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "GetMemoryReport"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.GetMemoryReportRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.GetMemoryReportResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("GetMemoryReport"))
              .build();
        }
      }
    }
    return getGetMemoryReportMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.FlushPrefixCacheRequest,
      com.arbi.v1.FlushPrefixCacheResponse> getFlushPrefixCacheMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "FlushPrefixCache",
      requestType = com.arbi.v1.FlushPrefixCacheRequest.class,
      responseType = com.arbi.v1.FlushPrefixCacheResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.FlushPrefixCacheRequest,
      com.arbi.v1.FlushPrefixCacheResponse> getFlushPrefixCacheMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.FlushPrefixCacheRequest, com.arbi.v1.FlushPrefixCacheResponse> getFlushPrefixCacheMethod;
    if ((getFlushPrefixCacheMethod = AdminServiceGrpc.getFlushPrefixCacheMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getFlushPrefixCacheMethod = AdminServiceGrpc.getFlushPrefixCacheMethod) == null) {
          AdminServiceGrpc.getFlushPrefixCacheMethod = getFlushPrefixCacheMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.FlushPrefixCacheRequest, com.arbi.v1.FlushPrefixCacheResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "FlushPrefixCache"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.FlushPrefixCacheRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.FlushPrefixCacheResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("FlushPrefixCache"))
              .build();
        }
      }
    }
    return getFlushPrefixCacheMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.ReloadKvCalibrationRequest,
      com.arbi.v1.ReloadKvCalibrationResponse> getReloadKvCalibrationMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ReloadKvCalibration",
      requestType = com.arbi.v1.ReloadKvCalibrationRequest.class,
      responseType = com.arbi.v1.ReloadKvCalibrationResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.ReloadKvCalibrationRequest,
      com.arbi.v1.ReloadKvCalibrationResponse> getReloadKvCalibrationMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.ReloadKvCalibrationRequest, com.arbi.v1.ReloadKvCalibrationResponse> getReloadKvCalibrationMethod;
    if ((getReloadKvCalibrationMethod = AdminServiceGrpc.getReloadKvCalibrationMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getReloadKvCalibrationMethod = AdminServiceGrpc.getReloadKvCalibrationMethod) == null) {
          AdminServiceGrpc.getReloadKvCalibrationMethod = getReloadKvCalibrationMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.ReloadKvCalibrationRequest, com.arbi.v1.ReloadKvCalibrationResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ReloadKvCalibration"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.ReloadKvCalibrationRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.ReloadKvCalibrationResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("ReloadKvCalibration"))
              .build();
        }
      }
    }
    return getReloadKvCalibrationMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.ListRunningRequestsRequest,
      com.arbi.v1.ListRunningRequestsResponse> getListRunningRequestsMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListRunningRequests",
      requestType = com.arbi.v1.ListRunningRequestsRequest.class,
      responseType = com.arbi.v1.ListRunningRequestsResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.ListRunningRequestsRequest,
      com.arbi.v1.ListRunningRequestsResponse> getListRunningRequestsMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.ListRunningRequestsRequest, com.arbi.v1.ListRunningRequestsResponse> getListRunningRequestsMethod;
    if ((getListRunningRequestsMethod = AdminServiceGrpc.getListRunningRequestsMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getListRunningRequestsMethod = AdminServiceGrpc.getListRunningRequestsMethod) == null) {
          AdminServiceGrpc.getListRunningRequestsMethod = getListRunningRequestsMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.ListRunningRequestsRequest, com.arbi.v1.ListRunningRequestsResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListRunningRequests"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.ListRunningRequestsRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.ListRunningRequestsResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("ListRunningRequests"))
              .build();
        }
      }
    }
    return getListRunningRequestsMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.CancelRunningRequestRequest,
      com.arbi.v1.CancelRunningRequestResponse> getCancelRunningRequestMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "CancelRunningRequest",
      requestType = com.arbi.v1.CancelRunningRequestRequest.class,
      responseType = com.arbi.v1.CancelRunningRequestResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.CancelRunningRequestRequest,
      com.arbi.v1.CancelRunningRequestResponse> getCancelRunningRequestMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.CancelRunningRequestRequest, com.arbi.v1.CancelRunningRequestResponse> getCancelRunningRequestMethod;
    if ((getCancelRunningRequestMethod = AdminServiceGrpc.getCancelRunningRequestMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getCancelRunningRequestMethod = AdminServiceGrpc.getCancelRunningRequestMethod) == null) {
          AdminServiceGrpc.getCancelRunningRequestMethod = getCancelRunningRequestMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.CancelRunningRequestRequest, com.arbi.v1.CancelRunningRequestResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "CancelRunningRequest"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.CancelRunningRequestRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.CancelRunningRequestResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("CancelRunningRequest"))
              .build();
        }
      }
    }
    return getCancelRunningRequestMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.GetRuntimeConfigRequest,
      com.arbi.v1.GetRuntimeConfigResponse> getGetRuntimeConfigMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "GetRuntimeConfig",
      requestType = com.arbi.v1.GetRuntimeConfigRequest.class,
      responseType = com.arbi.v1.GetRuntimeConfigResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.GetRuntimeConfigRequest,
      com.arbi.v1.GetRuntimeConfigResponse> getGetRuntimeConfigMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.GetRuntimeConfigRequest, com.arbi.v1.GetRuntimeConfigResponse> getGetRuntimeConfigMethod;
    if ((getGetRuntimeConfigMethod = AdminServiceGrpc.getGetRuntimeConfigMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getGetRuntimeConfigMethod = AdminServiceGrpc.getGetRuntimeConfigMethod) == null) {
          AdminServiceGrpc.getGetRuntimeConfigMethod = getGetRuntimeConfigMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.GetRuntimeConfigRequest, com.arbi.v1.GetRuntimeConfigResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "GetRuntimeConfig"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.GetRuntimeConfigRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.GetRuntimeConfigResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("GetRuntimeConfig"))
              .build();
        }
      }
    }
    return getGetRuntimeConfigMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.UpdateRuntimeConfigRequest,
      com.arbi.v1.UpdateRuntimeConfigResponse> getUpdateRuntimeConfigMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "UpdateRuntimeConfig",
      requestType = com.arbi.v1.UpdateRuntimeConfigRequest.class,
      responseType = com.arbi.v1.UpdateRuntimeConfigResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.UpdateRuntimeConfigRequest,
      com.arbi.v1.UpdateRuntimeConfigResponse> getUpdateRuntimeConfigMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.UpdateRuntimeConfigRequest, com.arbi.v1.UpdateRuntimeConfigResponse> getUpdateRuntimeConfigMethod;
    if ((getUpdateRuntimeConfigMethod = AdminServiceGrpc.getUpdateRuntimeConfigMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getUpdateRuntimeConfigMethod = AdminServiceGrpc.getUpdateRuntimeConfigMethod) == null) {
          AdminServiceGrpc.getUpdateRuntimeConfigMethod = getUpdateRuntimeConfigMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.UpdateRuntimeConfigRequest, com.arbi.v1.UpdateRuntimeConfigResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "UpdateRuntimeConfig"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.UpdateRuntimeConfigRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.UpdateRuntimeConfigResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("UpdateRuntimeConfig"))
              .build();
        }
      }
    }
    return getUpdateRuntimeConfigMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.DrainServerRequest,
      com.arbi.v1.DrainServerResponse> getDrainServerMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "DrainServer",
      requestType = com.arbi.v1.DrainServerRequest.class,
      responseType = com.arbi.v1.DrainServerResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.DrainServerRequest,
      com.arbi.v1.DrainServerResponse> getDrainServerMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.DrainServerRequest, com.arbi.v1.DrainServerResponse> getDrainServerMethod;
    if ((getDrainServerMethod = AdminServiceGrpc.getDrainServerMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getDrainServerMethod = AdminServiceGrpc.getDrainServerMethod) == null) {
          AdminServiceGrpc.getDrainServerMethod = getDrainServerMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.DrainServerRequest, com.arbi.v1.DrainServerResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "DrainServer"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.DrainServerRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.DrainServerResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("DrainServer"))
              .build();
        }
      }
    }
    return getDrainServerMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.ResumeServerRequest,
      com.arbi.v1.ResumeServerResponse> getResumeServerMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ResumeServer",
      requestType = com.arbi.v1.ResumeServerRequest.class,
      responseType = com.arbi.v1.ResumeServerResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.ResumeServerRequest,
      com.arbi.v1.ResumeServerResponse> getResumeServerMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.ResumeServerRequest, com.arbi.v1.ResumeServerResponse> getResumeServerMethod;
    if ((getResumeServerMethod = AdminServiceGrpc.getResumeServerMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getResumeServerMethod = AdminServiceGrpc.getResumeServerMethod) == null) {
          AdminServiceGrpc.getResumeServerMethod = getResumeServerMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.ResumeServerRequest, com.arbi.v1.ResumeServerResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ResumeServer"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.ResumeServerRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.ResumeServerResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("ResumeServer"))
              .build();
        }
      }
    }
    return getResumeServerMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static AdminServiceStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<AdminServiceStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<AdminServiceStub>() {
        @java.lang.Override
        public AdminServiceStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new AdminServiceStub(channel, callOptions);
        }
      };
    return AdminServiceStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static AdminServiceBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<AdminServiceBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<AdminServiceBlockingStub>() {
        @java.lang.Override
        public AdminServiceBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new AdminServiceBlockingStub(channel, callOptions);
        }
      };
    return AdminServiceBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static AdminServiceFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<AdminServiceFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<AdminServiceFutureStub>() {
        @java.lang.Override
        public AdminServiceFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new AdminServiceFutureStub(channel, callOptions);
        }
      };
    return AdminServiceFutureStub.newStub(factory, channel);
  }

  /**
   * <pre>
   * AdminService inspects and operates a running server: what it serves, its health and memory, the
   * requests in flight, its runtime settings, and the resident model.
   * Every RPC needs the admin credential in the metadata `authorization: Bearer &lt;admin token&gt;`. The
   * server mints the token on first boot into a file readable only by its owner (`admin-token` under the
   * cache directory) unless one is configured. Without a credential, or with a wrong one, a call fails with
   * UNAUTHENTICATED; with the generate token (a valid credential without admin rights) it fails with
   * PERMISSION_DENIED.
   * Errors are `google.rpc.Status` values with a canonical code and an `ErrorInfo` detail (domain
   * "arbi-serve"); INVALID_ARGUMENT also carries a `BadRequest` naming the field. Each RPC lists its codes
   * besides UNAUTHENTICATED and PERMISSION_DENIED, which every RPC may return.
   * </pre>
   */
  public static abstract class AdminServiceImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * GetServerInfo describes the server: version, resident model, backend, KV cache codec and limits.
     * Errors: none of its own.
     * </pre>
     */
    public void getServerInfo(com.arbi.v1.GetServerInfoRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.GetServerInfoResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetServerInfoMethod(), responseObserver);
    }

    /**
     * <pre>
     * CheckLiveness answers as long as the server process runs and serves RPCs.
     * Errors: none of its own.
     * </pre>
     */
    public void checkLiveness(com.arbi.v1.CheckLivenessRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.CheckLivenessResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getCheckLivenessMethod(), responseObserver);
    }

    /**
     * <pre>
     * CheckReadiness says whether a generate request would be admitted now. It is not ready while no model
     * is resident (at boot until the first model has loaded, during LoadModel, after UnloadModel) and
     * during a drain; during SwitchModel the old model keeps serving, so the server stays ready. The
     * standard `grpc.health.v1` service reports the same state (overall and for `arbi.v1.GenerateService`)
     * without a credential.
     * Errors: none of its own.
     * </pre>
     */
    public void checkReadiness(com.arbi.v1.CheckReadinessRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.CheckReadinessResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getCheckReadinessMethod(), responseObserver);
    }

    /**
     * <pre>
     * ListModels lists the models the server can load: known embedded models, imports in its local
     * model cache, and the resident model.
     * Errors: none of its own.
     * </pre>
     */
    public void listModels(com.arbi.v1.ListModelsRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.ListModelsResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListModelsMethod(), responseObserver);
    }

    /**
     * <pre>
     * LoadModel loads a model when none is resident (after UnloadModel).
     * Errors:
     * - FAILED_PRECONDITION: a model is already resident (use SwitchModel), or another load, unload or
     *   switch is in progress; or the model's architecture is not supported.
     * - INVALID_ARGUMENT: `model` is empty.
     * - NOT_FOUND: `model` is no known name, model directory, .gguf file or cached import.
     * - DATA_LOSS: a weights, config or tokenizer file is missing or corrupt.
     * - RESOURCE_EXHAUSTED: the configured KV cache memory holds no block of this model.
     * </pre>
     */
    public void loadModel(com.arbi.v1.LoadModelRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.LoadModelResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getLoadModelMethod(), responseObserver);
    }

    /**
     * <pre>
     * UnloadModel stops admitting requests, waits up to the drain timeout for the ones in flight to
     * finish, ends the rest with UNAVAILABLE, and frees the resident model. Readiness is NOT_SERVING
     * until a model is loaded again.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident, or another load, unload or switch is in progress.
     * - INVALID_ARGUMENT: `drain_timeout_ms` is negative.
     * </pre>
     */
    public void unloadModel(com.arbi.v1.UnloadModelRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.UnloadModelResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getUnloadModelMethod(), responseObserver);
    }

    /**
     * <pre>
     * SwitchModel replaces the resident model. The new model loads while the old one keeps serving; a
     * failed load leaves the old model serving and returns the load's error. After the load, new requests
     * go to the new model, and requests in flight on the old one have up to the drain timeout to finish;
     * the rest end with UNAVAILABLE ("the model was switched; retry"). No stream is left hanging.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident (use LoadModel), another load, unload or switch is in
     *   progress, or the new model's architecture is not supported.
     * - INVALID_ARGUMENT: `model` is empty or `drain_timeout_ms` is negative.
     * - NOT_FOUND, DATA_LOSS, RESOURCE_EXHAUSTED: the new model failed to load, as for LoadModel; the old
     *   model keeps serving.
     * </pre>
     */
    public void switchModel(com.arbi.v1.SwitchModelRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.SwitchModelResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getSwitchModelMethod(), responseObserver);
    }

    /**
     * <pre>
     * GetMemoryReport reports the KV cache pool (blocks used and free, bytes) and the model weights.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident.
     * </pre>
     */
    public void getMemoryReport(com.arbi.v1.GetMemoryReportRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.GetMemoryReportResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetMemoryReportMethod(), responseObserver);
    }

    /**
     * <pre>
     * FlushPrefixCache drops cached prompt prefixes, of every tenant or of one. Blocks that running
     * requests still use stay with them and return to the free pool when those requests end.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident.
     * </pre>
     */
    public void flushPrefixCache(com.arbi.v1.FlushPrefixCacheRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.FlushPrefixCacheResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getFlushPrefixCacheMethod(), responseObserver);
    }

    /**
     * <pre>
     * ReloadKvCalibration replaces the TKV calibration bundle of the resident model without a restart. It
     * loads and validates the bundle at `path` first; then it stops admitting requests, waits up to the
     * drain timeout for the requests in flight (the rest are cancelled: FINISH_REASON_CANCELLED), rebuilds
     * the KV cache storage with the bundle's scales and bits (the pool keeps its block count), empties the
     * prefix cache (its blocks were encoded with the old bundle) and admits requests again. A bad bundle
     * changes nothing: the old one keeps serving.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident, the server does not run a TKV KV cache
     *   (`--kv-cache-dtype tkv`), or another model operation is in progress.
     * - INVALID_ARGUMENT: `path` is empty or not a directory, the bundle was calibrated for another model
     *   (both fingerprints named) or for other layer shapes, `kv_bits` is invalid, or `drain_timeout_ms` is
     *   negative.
     * - DATA_LOSS: the bundle is corrupt (unreadable, checksum mismatch, invalid values).
     * - RESOURCE_EXHAUSTED: with the new bits the pool's blocks need more than the KV cache memory budget.
     * </pre>
     */
    public void reloadKvCalibration(com.arbi.v1.ReloadKvCalibrationRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.ReloadKvCalibrationResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getReloadKvCalibrationMethod(), responseObserver);
    }

    /**
     * <pre>
     * ListRunningRequests lists the requests the engine holds, waiting and running.
     * Errors: none of its own (an empty list when no model is resident).
     * </pre>
     */
    public void listRunningRequests(com.arbi.v1.ListRunningRequestsRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.ListRunningRequestsResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListRunningRequestsMethod(), responseObserver);
    }

    /**
     * <pre>
     * CancelRunningRequest stops one request at the next engine step and frees its KV cache blocks. Its
     * stream ends with FINISH_REASON_CANCELLED.
     * Errors:
     * - INVALID_ARGUMENT: `request_id` is empty.
     * - NOT_FOUND: no request with that id is in the engine (it may have just finished).
     * </pre>
     */
    public void cancelRunningRequest(com.arbi.v1.CancelRunningRequestRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.CancelRunningRequestResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getCancelRunningRequestMethod(), responseObserver);
    }

    /**
     * <pre>
     * GetRuntimeConfig returns the scheduling settings in force.
     * Errors: none of its own.
     * </pre>
     */
    public void getRuntimeConfig(com.arbi.v1.GetRuntimeConfigRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.GetRuntimeConfigResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetRuntimeConfigMethod(), responseObserver);
    }

    /**
     * <pre>
     * UpdateRuntimeConfig changes the settings named in `update_mask`, all or none: every value is
     * validated before any applies. The engine applies them from its next step.
     * Errors:
     * - INVALID_ARGUMENT: `update_mask` is empty or names an unknown field, or a value is out of range;
     *   BadRequest names each offending field.
     * </pre>
     */
    public void updateRuntimeConfig(com.arbi.v1.UpdateRuntimeConfigRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.UpdateRuntimeConfigResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getUpdateRuntimeConfigMethod(), responseObserver);
    }

    /**
     * <pre>
     * DrainServer stops admitting generate requests (they get UNAVAILABLE and readiness turns NOT_SERVING)
     * while the requests in flight go on. It waits up to `timeout_ms` for them to finish and reports how
     * many remain. Draining again is harmless.
     * Errors:
     * - INVALID_ARGUMENT: `timeout_ms` is negative.
     * </pre>
     */
    public void drainServer(com.arbi.v1.DrainServerRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.DrainServerResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getDrainServerMethod(), responseObserver);
    }

    /**
     * <pre>
     * ResumeServer admits generate requests again after a drain. Resuming a server that is not draining
     * is harmless.
     * Errors: none of its own.
     * </pre>
     */
    public void resumeServer(com.arbi.v1.ResumeServerRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.ResumeServerResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getResumeServerMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getGetServerInfoMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.GetServerInfoRequest,
                com.arbi.v1.GetServerInfoResponse>(
                  this, METHODID_GET_SERVER_INFO)))
          .addMethod(
            getCheckLivenessMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.CheckLivenessRequest,
                com.arbi.v1.CheckLivenessResponse>(
                  this, METHODID_CHECK_LIVENESS)))
          .addMethod(
            getCheckReadinessMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.CheckReadinessRequest,
                com.arbi.v1.CheckReadinessResponse>(
                  this, METHODID_CHECK_READINESS)))
          .addMethod(
            getListModelsMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.ListModelsRequest,
                com.arbi.v1.ListModelsResponse>(
                  this, METHODID_LIST_MODELS)))
          .addMethod(
            getLoadModelMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.LoadModelRequest,
                com.arbi.v1.LoadModelResponse>(
                  this, METHODID_LOAD_MODEL)))
          .addMethod(
            getUnloadModelMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.UnloadModelRequest,
                com.arbi.v1.UnloadModelResponse>(
                  this, METHODID_UNLOAD_MODEL)))
          .addMethod(
            getSwitchModelMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.SwitchModelRequest,
                com.arbi.v1.SwitchModelResponse>(
                  this, METHODID_SWITCH_MODEL)))
          .addMethod(
            getGetMemoryReportMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.GetMemoryReportRequest,
                com.arbi.v1.GetMemoryReportResponse>(
                  this, METHODID_GET_MEMORY_REPORT)))
          .addMethod(
            getFlushPrefixCacheMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.FlushPrefixCacheRequest,
                com.arbi.v1.FlushPrefixCacheResponse>(
                  this, METHODID_FLUSH_PREFIX_CACHE)))
          .addMethod(
            getReloadKvCalibrationMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.ReloadKvCalibrationRequest,
                com.arbi.v1.ReloadKvCalibrationResponse>(
                  this, METHODID_RELOAD_KV_CALIBRATION)))
          .addMethod(
            getListRunningRequestsMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.ListRunningRequestsRequest,
                com.arbi.v1.ListRunningRequestsResponse>(
                  this, METHODID_LIST_RUNNING_REQUESTS)))
          .addMethod(
            getCancelRunningRequestMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.CancelRunningRequestRequest,
                com.arbi.v1.CancelRunningRequestResponse>(
                  this, METHODID_CANCEL_RUNNING_REQUEST)))
          .addMethod(
            getGetRuntimeConfigMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.GetRuntimeConfigRequest,
                com.arbi.v1.GetRuntimeConfigResponse>(
                  this, METHODID_GET_RUNTIME_CONFIG)))
          .addMethod(
            getUpdateRuntimeConfigMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.UpdateRuntimeConfigRequest,
                com.arbi.v1.UpdateRuntimeConfigResponse>(
                  this, METHODID_UPDATE_RUNTIME_CONFIG)))
          .addMethod(
            getDrainServerMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.DrainServerRequest,
                com.arbi.v1.DrainServerResponse>(
                  this, METHODID_DRAIN_SERVER)))
          .addMethod(
            getResumeServerMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.ResumeServerRequest,
                com.arbi.v1.ResumeServerResponse>(
                  this, METHODID_RESUME_SERVER)))
          .build();
    }
  }

  /**
   * <pre>
   * AdminService inspects and operates a running server: what it serves, its health and memory, the
   * requests in flight, its runtime settings, and the resident model.
   * Every RPC needs the admin credential in the metadata `authorization: Bearer &lt;admin token&gt;`. The
   * server mints the token on first boot into a file readable only by its owner (`admin-token` under the
   * cache directory) unless one is configured. Without a credential, or with a wrong one, a call fails with
   * UNAUTHENTICATED; with the generate token (a valid credential without admin rights) it fails with
   * PERMISSION_DENIED.
   * Errors are `google.rpc.Status` values with a canonical code and an `ErrorInfo` detail (domain
   * "arbi-serve"); INVALID_ARGUMENT also carries a `BadRequest` naming the field. Each RPC lists its codes
   * besides UNAUTHENTICATED and PERMISSION_DENIED, which every RPC may return.
   * </pre>
   */
  public static final class AdminServiceStub extends io.grpc.stub.AbstractAsyncStub<AdminServiceStub> {
    private AdminServiceStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected AdminServiceStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new AdminServiceStub(channel, callOptions);
    }

    /**
     * <pre>
     * GetServerInfo describes the server: version, resident model, backend, KV cache codec and limits.
     * Errors: none of its own.
     * </pre>
     */
    public void getServerInfo(com.arbi.v1.GetServerInfoRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.GetServerInfoResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getGetServerInfoMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * CheckLiveness answers as long as the server process runs and serves RPCs.
     * Errors: none of its own.
     * </pre>
     */
    public void checkLiveness(com.arbi.v1.CheckLivenessRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.CheckLivenessResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getCheckLivenessMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * CheckReadiness says whether a generate request would be admitted now. It is not ready while no model
     * is resident (at boot until the first model has loaded, during LoadModel, after UnloadModel) and
     * during a drain; during SwitchModel the old model keeps serving, so the server stays ready. The
     * standard `grpc.health.v1` service reports the same state (overall and for `arbi.v1.GenerateService`)
     * without a credential.
     * Errors: none of its own.
     * </pre>
     */
    public void checkReadiness(com.arbi.v1.CheckReadinessRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.CheckReadinessResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getCheckReadinessMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * ListModels lists the models the server can load: known embedded models, imports in its local
     * model cache, and the resident model.
     * Errors: none of its own.
     * </pre>
     */
    public void listModels(com.arbi.v1.ListModelsRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.ListModelsResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListModelsMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * LoadModel loads a model when none is resident (after UnloadModel).
     * Errors:
     * - FAILED_PRECONDITION: a model is already resident (use SwitchModel), or another load, unload or
     *   switch is in progress; or the model's architecture is not supported.
     * - INVALID_ARGUMENT: `model` is empty.
     * - NOT_FOUND: `model` is no known name, model directory, .gguf file or cached import.
     * - DATA_LOSS: a weights, config or tokenizer file is missing or corrupt.
     * - RESOURCE_EXHAUSTED: the configured KV cache memory holds no block of this model.
     * </pre>
     */
    public void loadModel(com.arbi.v1.LoadModelRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.LoadModelResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getLoadModelMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * UnloadModel stops admitting requests, waits up to the drain timeout for the ones in flight to
     * finish, ends the rest with UNAVAILABLE, and frees the resident model. Readiness is NOT_SERVING
     * until a model is loaded again.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident, or another load, unload or switch is in progress.
     * - INVALID_ARGUMENT: `drain_timeout_ms` is negative.
     * </pre>
     */
    public void unloadModel(com.arbi.v1.UnloadModelRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.UnloadModelResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getUnloadModelMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * SwitchModel replaces the resident model. The new model loads while the old one keeps serving; a
     * failed load leaves the old model serving and returns the load's error. After the load, new requests
     * go to the new model, and requests in flight on the old one have up to the drain timeout to finish;
     * the rest end with UNAVAILABLE ("the model was switched; retry"). No stream is left hanging.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident (use LoadModel), another load, unload or switch is in
     *   progress, or the new model's architecture is not supported.
     * - INVALID_ARGUMENT: `model` is empty or `drain_timeout_ms` is negative.
     * - NOT_FOUND, DATA_LOSS, RESOURCE_EXHAUSTED: the new model failed to load, as for LoadModel; the old
     *   model keeps serving.
     * </pre>
     */
    public void switchModel(com.arbi.v1.SwitchModelRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.SwitchModelResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getSwitchModelMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * GetMemoryReport reports the KV cache pool (blocks used and free, bytes) and the model weights.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident.
     * </pre>
     */
    public void getMemoryReport(com.arbi.v1.GetMemoryReportRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.GetMemoryReportResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getGetMemoryReportMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * FlushPrefixCache drops cached prompt prefixes, of every tenant or of one. Blocks that running
     * requests still use stay with them and return to the free pool when those requests end.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident.
     * </pre>
     */
    public void flushPrefixCache(com.arbi.v1.FlushPrefixCacheRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.FlushPrefixCacheResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getFlushPrefixCacheMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * ReloadKvCalibration replaces the TKV calibration bundle of the resident model without a restart. It
     * loads and validates the bundle at `path` first; then it stops admitting requests, waits up to the
     * drain timeout for the requests in flight (the rest are cancelled: FINISH_REASON_CANCELLED), rebuilds
     * the KV cache storage with the bundle's scales and bits (the pool keeps its block count), empties the
     * prefix cache (its blocks were encoded with the old bundle) and admits requests again. A bad bundle
     * changes nothing: the old one keeps serving.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident, the server does not run a TKV KV cache
     *   (`--kv-cache-dtype tkv`), or another model operation is in progress.
     * - INVALID_ARGUMENT: `path` is empty or not a directory, the bundle was calibrated for another model
     *   (both fingerprints named) or for other layer shapes, `kv_bits` is invalid, or `drain_timeout_ms` is
     *   negative.
     * - DATA_LOSS: the bundle is corrupt (unreadable, checksum mismatch, invalid values).
     * - RESOURCE_EXHAUSTED: with the new bits the pool's blocks need more than the KV cache memory budget.
     * </pre>
     */
    public void reloadKvCalibration(com.arbi.v1.ReloadKvCalibrationRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.ReloadKvCalibrationResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getReloadKvCalibrationMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * ListRunningRequests lists the requests the engine holds, waiting and running.
     * Errors: none of its own (an empty list when no model is resident).
     * </pre>
     */
    public void listRunningRequests(com.arbi.v1.ListRunningRequestsRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.ListRunningRequestsResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListRunningRequestsMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * CancelRunningRequest stops one request at the next engine step and frees its KV cache blocks. Its
     * stream ends with FINISH_REASON_CANCELLED.
     * Errors:
     * - INVALID_ARGUMENT: `request_id` is empty.
     * - NOT_FOUND: no request with that id is in the engine (it may have just finished).
     * </pre>
     */
    public void cancelRunningRequest(com.arbi.v1.CancelRunningRequestRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.CancelRunningRequestResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getCancelRunningRequestMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * GetRuntimeConfig returns the scheduling settings in force.
     * Errors: none of its own.
     * </pre>
     */
    public void getRuntimeConfig(com.arbi.v1.GetRuntimeConfigRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.GetRuntimeConfigResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getGetRuntimeConfigMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * UpdateRuntimeConfig changes the settings named in `update_mask`, all or none: every value is
     * validated before any applies. The engine applies them from its next step.
     * Errors:
     * - INVALID_ARGUMENT: `update_mask` is empty or names an unknown field, or a value is out of range;
     *   BadRequest names each offending field.
     * </pre>
     */
    public void updateRuntimeConfig(com.arbi.v1.UpdateRuntimeConfigRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.UpdateRuntimeConfigResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getUpdateRuntimeConfigMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * DrainServer stops admitting generate requests (they get UNAVAILABLE and readiness turns NOT_SERVING)
     * while the requests in flight go on. It waits up to `timeout_ms` for them to finish and reports how
     * many remain. Draining again is harmless.
     * Errors:
     * - INVALID_ARGUMENT: `timeout_ms` is negative.
     * </pre>
     */
    public void drainServer(com.arbi.v1.DrainServerRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.DrainServerResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getDrainServerMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * ResumeServer admits generate requests again after a drain. Resuming a server that is not draining
     * is harmless.
     * Errors: none of its own.
     * </pre>
     */
    public void resumeServer(com.arbi.v1.ResumeServerRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.ResumeServerResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getResumeServerMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * <pre>
   * AdminService inspects and operates a running server: what it serves, its health and memory, the
   * requests in flight, its runtime settings, and the resident model.
   * Every RPC needs the admin credential in the metadata `authorization: Bearer &lt;admin token&gt;`. The
   * server mints the token on first boot into a file readable only by its owner (`admin-token` under the
   * cache directory) unless one is configured. Without a credential, or with a wrong one, a call fails with
   * UNAUTHENTICATED; with the generate token (a valid credential without admin rights) it fails with
   * PERMISSION_DENIED.
   * Errors are `google.rpc.Status` values with a canonical code and an `ErrorInfo` detail (domain
   * "arbi-serve"); INVALID_ARGUMENT also carries a `BadRequest` naming the field. Each RPC lists its codes
   * besides UNAUTHENTICATED and PERMISSION_DENIED, which every RPC may return.
   * </pre>
   */
  public static final class AdminServiceBlockingStub extends io.grpc.stub.AbstractBlockingStub<AdminServiceBlockingStub> {
    private AdminServiceBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected AdminServiceBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new AdminServiceBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * GetServerInfo describes the server: version, resident model, backend, KV cache codec and limits.
     * Errors: none of its own.
     * </pre>
     */
    public com.arbi.v1.GetServerInfoResponse getServerInfo(com.arbi.v1.GetServerInfoRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getGetServerInfoMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * CheckLiveness answers as long as the server process runs and serves RPCs.
     * Errors: none of its own.
     * </pre>
     */
    public com.arbi.v1.CheckLivenessResponse checkLiveness(com.arbi.v1.CheckLivenessRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getCheckLivenessMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * CheckReadiness says whether a generate request would be admitted now. It is not ready while no model
     * is resident (at boot until the first model has loaded, during LoadModel, after UnloadModel) and
     * during a drain; during SwitchModel the old model keeps serving, so the server stays ready. The
     * standard `grpc.health.v1` service reports the same state (overall and for `arbi.v1.GenerateService`)
     * without a credential.
     * Errors: none of its own.
     * </pre>
     */
    public com.arbi.v1.CheckReadinessResponse checkReadiness(com.arbi.v1.CheckReadinessRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getCheckReadinessMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * ListModels lists the models the server can load: known embedded models, imports in its local
     * model cache, and the resident model.
     * Errors: none of its own.
     * </pre>
     */
    public com.arbi.v1.ListModelsResponse listModels(com.arbi.v1.ListModelsRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListModelsMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * LoadModel loads a model when none is resident (after UnloadModel).
     * Errors:
     * - FAILED_PRECONDITION: a model is already resident (use SwitchModel), or another load, unload or
     *   switch is in progress; or the model's architecture is not supported.
     * - INVALID_ARGUMENT: `model` is empty.
     * - NOT_FOUND: `model` is no known name, model directory, .gguf file or cached import.
     * - DATA_LOSS: a weights, config or tokenizer file is missing or corrupt.
     * - RESOURCE_EXHAUSTED: the configured KV cache memory holds no block of this model.
     * </pre>
     */
    public com.arbi.v1.LoadModelResponse loadModel(com.arbi.v1.LoadModelRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getLoadModelMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * UnloadModel stops admitting requests, waits up to the drain timeout for the ones in flight to
     * finish, ends the rest with UNAVAILABLE, and frees the resident model. Readiness is NOT_SERVING
     * until a model is loaded again.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident, or another load, unload or switch is in progress.
     * - INVALID_ARGUMENT: `drain_timeout_ms` is negative.
     * </pre>
     */
    public com.arbi.v1.UnloadModelResponse unloadModel(com.arbi.v1.UnloadModelRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getUnloadModelMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * SwitchModel replaces the resident model. The new model loads while the old one keeps serving; a
     * failed load leaves the old model serving and returns the load's error. After the load, new requests
     * go to the new model, and requests in flight on the old one have up to the drain timeout to finish;
     * the rest end with UNAVAILABLE ("the model was switched; retry"). No stream is left hanging.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident (use LoadModel), another load, unload or switch is in
     *   progress, or the new model's architecture is not supported.
     * - INVALID_ARGUMENT: `model` is empty or `drain_timeout_ms` is negative.
     * - NOT_FOUND, DATA_LOSS, RESOURCE_EXHAUSTED: the new model failed to load, as for LoadModel; the old
     *   model keeps serving.
     * </pre>
     */
    public com.arbi.v1.SwitchModelResponse switchModel(com.arbi.v1.SwitchModelRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getSwitchModelMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * GetMemoryReport reports the KV cache pool (blocks used and free, bytes) and the model weights.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident.
     * </pre>
     */
    public com.arbi.v1.GetMemoryReportResponse getMemoryReport(com.arbi.v1.GetMemoryReportRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getGetMemoryReportMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * FlushPrefixCache drops cached prompt prefixes, of every tenant or of one. Blocks that running
     * requests still use stay with them and return to the free pool when those requests end.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident.
     * </pre>
     */
    public com.arbi.v1.FlushPrefixCacheResponse flushPrefixCache(com.arbi.v1.FlushPrefixCacheRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getFlushPrefixCacheMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * ReloadKvCalibration replaces the TKV calibration bundle of the resident model without a restart. It
     * loads and validates the bundle at `path` first; then it stops admitting requests, waits up to the
     * drain timeout for the requests in flight (the rest are cancelled: FINISH_REASON_CANCELLED), rebuilds
     * the KV cache storage with the bundle's scales and bits (the pool keeps its block count), empties the
     * prefix cache (its blocks were encoded with the old bundle) and admits requests again. A bad bundle
     * changes nothing: the old one keeps serving.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident, the server does not run a TKV KV cache
     *   (`--kv-cache-dtype tkv`), or another model operation is in progress.
     * - INVALID_ARGUMENT: `path` is empty or not a directory, the bundle was calibrated for another model
     *   (both fingerprints named) or for other layer shapes, `kv_bits` is invalid, or `drain_timeout_ms` is
     *   negative.
     * - DATA_LOSS: the bundle is corrupt (unreadable, checksum mismatch, invalid values).
     * - RESOURCE_EXHAUSTED: with the new bits the pool's blocks need more than the KV cache memory budget.
     * </pre>
     */
    public com.arbi.v1.ReloadKvCalibrationResponse reloadKvCalibration(com.arbi.v1.ReloadKvCalibrationRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getReloadKvCalibrationMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * ListRunningRequests lists the requests the engine holds, waiting and running.
     * Errors: none of its own (an empty list when no model is resident).
     * </pre>
     */
    public com.arbi.v1.ListRunningRequestsResponse listRunningRequests(com.arbi.v1.ListRunningRequestsRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListRunningRequestsMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * CancelRunningRequest stops one request at the next engine step and frees its KV cache blocks. Its
     * stream ends with FINISH_REASON_CANCELLED.
     * Errors:
     * - INVALID_ARGUMENT: `request_id` is empty.
     * - NOT_FOUND: no request with that id is in the engine (it may have just finished).
     * </pre>
     */
    public com.arbi.v1.CancelRunningRequestResponse cancelRunningRequest(com.arbi.v1.CancelRunningRequestRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getCancelRunningRequestMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * GetRuntimeConfig returns the scheduling settings in force.
     * Errors: none of its own.
     * </pre>
     */
    public com.arbi.v1.GetRuntimeConfigResponse getRuntimeConfig(com.arbi.v1.GetRuntimeConfigRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getGetRuntimeConfigMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * UpdateRuntimeConfig changes the settings named in `update_mask`, all or none: every value is
     * validated before any applies. The engine applies them from its next step.
     * Errors:
     * - INVALID_ARGUMENT: `update_mask` is empty or names an unknown field, or a value is out of range;
     *   BadRequest names each offending field.
     * </pre>
     */
    public com.arbi.v1.UpdateRuntimeConfigResponse updateRuntimeConfig(com.arbi.v1.UpdateRuntimeConfigRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getUpdateRuntimeConfigMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * DrainServer stops admitting generate requests (they get UNAVAILABLE and readiness turns NOT_SERVING)
     * while the requests in flight go on. It waits up to `timeout_ms` for them to finish and reports how
     * many remain. Draining again is harmless.
     * Errors:
     * - INVALID_ARGUMENT: `timeout_ms` is negative.
     * </pre>
     */
    public com.arbi.v1.DrainServerResponse drainServer(com.arbi.v1.DrainServerRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getDrainServerMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * ResumeServer admits generate requests again after a drain. Resuming a server that is not draining
     * is harmless.
     * Errors: none of its own.
     * </pre>
     */
    public com.arbi.v1.ResumeServerResponse resumeServer(com.arbi.v1.ResumeServerRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getResumeServerMethod(), getCallOptions(), request);
    }
  }

  /**
   * <pre>
   * AdminService inspects and operates a running server: what it serves, its health and memory, the
   * requests in flight, its runtime settings, and the resident model.
   * Every RPC needs the admin credential in the metadata `authorization: Bearer &lt;admin token&gt;`. The
   * server mints the token on first boot into a file readable only by its owner (`admin-token` under the
   * cache directory) unless one is configured. Without a credential, or with a wrong one, a call fails with
   * UNAUTHENTICATED; with the generate token (a valid credential without admin rights) it fails with
   * PERMISSION_DENIED.
   * Errors are `google.rpc.Status` values with a canonical code and an `ErrorInfo` detail (domain
   * "arbi-serve"); INVALID_ARGUMENT also carries a `BadRequest` naming the field. Each RPC lists its codes
   * besides UNAUTHENTICATED and PERMISSION_DENIED, which every RPC may return.
   * </pre>
   */
  public static final class AdminServiceFutureStub extends io.grpc.stub.AbstractFutureStub<AdminServiceFutureStub> {
    private AdminServiceFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected AdminServiceFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new AdminServiceFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * GetServerInfo describes the server: version, resident model, backend, KV cache codec and limits.
     * Errors: none of its own.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.GetServerInfoResponse> getServerInfo(
        com.arbi.v1.GetServerInfoRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getGetServerInfoMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * CheckLiveness answers as long as the server process runs and serves RPCs.
     * Errors: none of its own.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.CheckLivenessResponse> checkLiveness(
        com.arbi.v1.CheckLivenessRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getCheckLivenessMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * CheckReadiness says whether a generate request would be admitted now. It is not ready while no model
     * is resident (at boot until the first model has loaded, during LoadModel, after UnloadModel) and
     * during a drain; during SwitchModel the old model keeps serving, so the server stays ready. The
     * standard `grpc.health.v1` service reports the same state (overall and for `arbi.v1.GenerateService`)
     * without a credential.
     * Errors: none of its own.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.CheckReadinessResponse> checkReadiness(
        com.arbi.v1.CheckReadinessRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getCheckReadinessMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * ListModels lists the models the server can load: known embedded models, imports in its local
     * model cache, and the resident model.
     * Errors: none of its own.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.ListModelsResponse> listModels(
        com.arbi.v1.ListModelsRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListModelsMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * LoadModel loads a model when none is resident (after UnloadModel).
     * Errors:
     * - FAILED_PRECONDITION: a model is already resident (use SwitchModel), or another load, unload or
     *   switch is in progress; or the model's architecture is not supported.
     * - INVALID_ARGUMENT: `model` is empty.
     * - NOT_FOUND: `model` is no known name, model directory, .gguf file or cached import.
     * - DATA_LOSS: a weights, config or tokenizer file is missing or corrupt.
     * - RESOURCE_EXHAUSTED: the configured KV cache memory holds no block of this model.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.LoadModelResponse> loadModel(
        com.arbi.v1.LoadModelRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getLoadModelMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * UnloadModel stops admitting requests, waits up to the drain timeout for the ones in flight to
     * finish, ends the rest with UNAVAILABLE, and frees the resident model. Readiness is NOT_SERVING
     * until a model is loaded again.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident, or another load, unload or switch is in progress.
     * - INVALID_ARGUMENT: `drain_timeout_ms` is negative.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.UnloadModelResponse> unloadModel(
        com.arbi.v1.UnloadModelRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getUnloadModelMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * SwitchModel replaces the resident model. The new model loads while the old one keeps serving; a
     * failed load leaves the old model serving and returns the load's error. After the load, new requests
     * go to the new model, and requests in flight on the old one have up to the drain timeout to finish;
     * the rest end with UNAVAILABLE ("the model was switched; retry"). No stream is left hanging.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident (use LoadModel), another load, unload or switch is in
     *   progress, or the new model's architecture is not supported.
     * - INVALID_ARGUMENT: `model` is empty or `drain_timeout_ms` is negative.
     * - NOT_FOUND, DATA_LOSS, RESOURCE_EXHAUSTED: the new model failed to load, as for LoadModel; the old
     *   model keeps serving.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.SwitchModelResponse> switchModel(
        com.arbi.v1.SwitchModelRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getSwitchModelMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * GetMemoryReport reports the KV cache pool (blocks used and free, bytes) and the model weights.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.GetMemoryReportResponse> getMemoryReport(
        com.arbi.v1.GetMemoryReportRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getGetMemoryReportMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * FlushPrefixCache drops cached prompt prefixes, of every tenant or of one. Blocks that running
     * requests still use stay with them and return to the free pool when those requests end.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.FlushPrefixCacheResponse> flushPrefixCache(
        com.arbi.v1.FlushPrefixCacheRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getFlushPrefixCacheMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * ReloadKvCalibration replaces the TKV calibration bundle of the resident model without a restart. It
     * loads and validates the bundle at `path` first; then it stops admitting requests, waits up to the
     * drain timeout for the requests in flight (the rest are cancelled: FINISH_REASON_CANCELLED), rebuilds
     * the KV cache storage with the bundle's scales and bits (the pool keeps its block count), empties the
     * prefix cache (its blocks were encoded with the old bundle) and admits requests again. A bad bundle
     * changes nothing: the old one keeps serving.
     * Errors:
     * - FAILED_PRECONDITION: no model is resident, the server does not run a TKV KV cache
     *   (`--kv-cache-dtype tkv`), or another model operation is in progress.
     * - INVALID_ARGUMENT: `path` is empty or not a directory, the bundle was calibrated for another model
     *   (both fingerprints named) or for other layer shapes, `kv_bits` is invalid, or `drain_timeout_ms` is
     *   negative.
     * - DATA_LOSS: the bundle is corrupt (unreadable, checksum mismatch, invalid values).
     * - RESOURCE_EXHAUSTED: with the new bits the pool's blocks need more than the KV cache memory budget.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.ReloadKvCalibrationResponse> reloadKvCalibration(
        com.arbi.v1.ReloadKvCalibrationRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getReloadKvCalibrationMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * ListRunningRequests lists the requests the engine holds, waiting and running.
     * Errors: none of its own (an empty list when no model is resident).
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.ListRunningRequestsResponse> listRunningRequests(
        com.arbi.v1.ListRunningRequestsRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListRunningRequestsMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * CancelRunningRequest stops one request at the next engine step and frees its KV cache blocks. Its
     * stream ends with FINISH_REASON_CANCELLED.
     * Errors:
     * - INVALID_ARGUMENT: `request_id` is empty.
     * - NOT_FOUND: no request with that id is in the engine (it may have just finished).
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.CancelRunningRequestResponse> cancelRunningRequest(
        com.arbi.v1.CancelRunningRequestRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getCancelRunningRequestMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * GetRuntimeConfig returns the scheduling settings in force.
     * Errors: none of its own.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.GetRuntimeConfigResponse> getRuntimeConfig(
        com.arbi.v1.GetRuntimeConfigRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getGetRuntimeConfigMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * UpdateRuntimeConfig changes the settings named in `update_mask`, all or none: every value is
     * validated before any applies. The engine applies them from its next step.
     * Errors:
     * - INVALID_ARGUMENT: `update_mask` is empty or names an unknown field, or a value is out of range;
     *   BadRequest names each offending field.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.UpdateRuntimeConfigResponse> updateRuntimeConfig(
        com.arbi.v1.UpdateRuntimeConfigRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getUpdateRuntimeConfigMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * DrainServer stops admitting generate requests (they get UNAVAILABLE and readiness turns NOT_SERVING)
     * while the requests in flight go on. It waits up to `timeout_ms` for them to finish and reports how
     * many remain. Draining again is harmless.
     * Errors:
     * - INVALID_ARGUMENT: `timeout_ms` is negative.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.DrainServerResponse> drainServer(
        com.arbi.v1.DrainServerRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getDrainServerMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * ResumeServer admits generate requests again after a drain. Resuming a server that is not draining
     * is harmless.
     * Errors: none of its own.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.ResumeServerResponse> resumeServer(
        com.arbi.v1.ResumeServerRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getResumeServerMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_GET_SERVER_INFO = 0;
  private static final int METHODID_CHECK_LIVENESS = 1;
  private static final int METHODID_CHECK_READINESS = 2;
  private static final int METHODID_LIST_MODELS = 3;
  private static final int METHODID_LOAD_MODEL = 4;
  private static final int METHODID_UNLOAD_MODEL = 5;
  private static final int METHODID_SWITCH_MODEL = 6;
  private static final int METHODID_GET_MEMORY_REPORT = 7;
  private static final int METHODID_FLUSH_PREFIX_CACHE = 8;
  private static final int METHODID_RELOAD_KV_CALIBRATION = 9;
  private static final int METHODID_LIST_RUNNING_REQUESTS = 10;
  private static final int METHODID_CANCEL_RUNNING_REQUEST = 11;
  private static final int METHODID_GET_RUNTIME_CONFIG = 12;
  private static final int METHODID_UPDATE_RUNTIME_CONFIG = 13;
  private static final int METHODID_DRAIN_SERVER = 14;
  private static final int METHODID_RESUME_SERVER = 15;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final AdminServiceImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(AdminServiceImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_GET_SERVER_INFO:
          serviceImpl.getServerInfo((com.arbi.v1.GetServerInfoRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.GetServerInfoResponse>) responseObserver);
          break;
        case METHODID_CHECK_LIVENESS:
          serviceImpl.checkLiveness((com.arbi.v1.CheckLivenessRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.CheckLivenessResponse>) responseObserver);
          break;
        case METHODID_CHECK_READINESS:
          serviceImpl.checkReadiness((com.arbi.v1.CheckReadinessRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.CheckReadinessResponse>) responseObserver);
          break;
        case METHODID_LIST_MODELS:
          serviceImpl.listModels((com.arbi.v1.ListModelsRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.ListModelsResponse>) responseObserver);
          break;
        case METHODID_LOAD_MODEL:
          serviceImpl.loadModel((com.arbi.v1.LoadModelRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.LoadModelResponse>) responseObserver);
          break;
        case METHODID_UNLOAD_MODEL:
          serviceImpl.unloadModel((com.arbi.v1.UnloadModelRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.UnloadModelResponse>) responseObserver);
          break;
        case METHODID_SWITCH_MODEL:
          serviceImpl.switchModel((com.arbi.v1.SwitchModelRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.SwitchModelResponse>) responseObserver);
          break;
        case METHODID_GET_MEMORY_REPORT:
          serviceImpl.getMemoryReport((com.arbi.v1.GetMemoryReportRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.GetMemoryReportResponse>) responseObserver);
          break;
        case METHODID_FLUSH_PREFIX_CACHE:
          serviceImpl.flushPrefixCache((com.arbi.v1.FlushPrefixCacheRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.FlushPrefixCacheResponse>) responseObserver);
          break;
        case METHODID_RELOAD_KV_CALIBRATION:
          serviceImpl.reloadKvCalibration((com.arbi.v1.ReloadKvCalibrationRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.ReloadKvCalibrationResponse>) responseObserver);
          break;
        case METHODID_LIST_RUNNING_REQUESTS:
          serviceImpl.listRunningRequests((com.arbi.v1.ListRunningRequestsRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.ListRunningRequestsResponse>) responseObserver);
          break;
        case METHODID_CANCEL_RUNNING_REQUEST:
          serviceImpl.cancelRunningRequest((com.arbi.v1.CancelRunningRequestRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.CancelRunningRequestResponse>) responseObserver);
          break;
        case METHODID_GET_RUNTIME_CONFIG:
          serviceImpl.getRuntimeConfig((com.arbi.v1.GetRuntimeConfigRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.GetRuntimeConfigResponse>) responseObserver);
          break;
        case METHODID_UPDATE_RUNTIME_CONFIG:
          serviceImpl.updateRuntimeConfig((com.arbi.v1.UpdateRuntimeConfigRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.UpdateRuntimeConfigResponse>) responseObserver);
          break;
        case METHODID_DRAIN_SERVER:
          serviceImpl.drainServer((com.arbi.v1.DrainServerRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.DrainServerResponse>) responseObserver);
          break;
        case METHODID_RESUME_SERVER:
          serviceImpl.resumeServer((com.arbi.v1.ResumeServerRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.ResumeServerResponse>) responseObserver);
          break;
        default:
          throw new AssertionError();
      }
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public io.grpc.stub.StreamObserver<Req> invoke(
        io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        default:
          throw new AssertionError();
      }
    }
  }

  private static abstract class AdminServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    AdminServiceBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return com.arbi.v1.AdminServiceProto.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("AdminService");
    }
  }

  private static final class AdminServiceFileDescriptorSupplier
      extends AdminServiceBaseDescriptorSupplier {
    AdminServiceFileDescriptorSupplier() {}
  }

  private static final class AdminServiceMethodDescriptorSupplier
      extends AdminServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    AdminServiceMethodDescriptorSupplier(String methodName) {
      this.methodName = methodName;
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.MethodDescriptor getMethodDescriptor() {
      return getServiceDescriptor().findMethodByName(methodName);
    }
  }

  private static volatile io.grpc.ServiceDescriptor serviceDescriptor;

  public static io.grpc.ServiceDescriptor getServiceDescriptor() {
    io.grpc.ServiceDescriptor result = serviceDescriptor;
    if (result == null) {
      synchronized (AdminServiceGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new AdminServiceFileDescriptorSupplier())
              .addMethod(getGetServerInfoMethod())
              .addMethod(getCheckLivenessMethod())
              .addMethod(getCheckReadinessMethod())
              .addMethod(getListModelsMethod())
              .addMethod(getLoadModelMethod())
              .addMethod(getUnloadModelMethod())
              .addMethod(getSwitchModelMethod())
              .addMethod(getGetMemoryReportMethod())
              .addMethod(getFlushPrefixCacheMethod())
              .addMethod(getReloadKvCalibrationMethod())
              .addMethod(getListRunningRequestsMethod())
              .addMethod(getCancelRunningRequestMethod())
              .addMethod(getGetRuntimeConfigMethod())
              .addMethod(getUpdateRuntimeConfigMethod())
              .addMethod(getDrainServerMethod())
              .addMethod(getResumeServerMethod())
              .build();
        }
      }
    }
    return result;
  }
}
