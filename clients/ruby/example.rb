#!/usr/bin/env ruby
# frozen_string_literal: true

# Streams one greedy chat completion from an arbi-serve server, then prints the server's description
# from the admin API.
#
# Usage: ARBI_ADMIN_TOKEN=... ruby example.rb HOST:PORT
# ARBI_GENERATE_TOKEN is sent with the generate call when the server requires one.

$LOAD_PATH.unshift(File.join(__dir__, 'gen'))
require 'arbi/v1/admin_service_services_pb'
require 'arbi/v1/generate_service_services_pb'

QUESTION = 'What is the capital of France?'

# The options of one call: a two-minute deadline and, for a non-empty token, the bearer credential.
def call_options(token)
  metadata = token.empty? ? {} : { 'authorization' => "Bearer #{token}" }
  { deadline: Time.now + 120, metadata: metadata }
end

# Prints the answer to QUESTION as it streams, then the finish reason and token usage.
def stream_chat(stub, token)
  request = Arbi::V1::GenerateRequest.new(
    chat: Arbi::V1::ChatInput.new(messages: [Arbi::V1::ChatMessage.new(role: 'user', content: QUESTION)]),
    sampling: Arbi::V1::SamplingParameters.new(temperature: 0.0),
    stopping: Arbi::V1::StoppingCriteria.new(max_output_tokens: 32)
  )
  stub.generate(request, **call_options(token)).each do |response|
    $stdout.write(response.text)
    $stdout.flush
    next if response.usage.nil?

    puts "\nfinish: #{response.finish_reason}, prompt tokens: #{response.usage.prompt_token_count}, " \
         "output tokens: #{response.usage.output_token_count}"
  end
end

# Prints what the server is and serves.
def print_server_info(stub, token)
  info = stub.get_server_info(Arbi::V1::GetServerInfoRequest.new, **call_options(token))
  model = info.model || Arbi::V1::ModelInfo.new
  puts "server: arbi-serve #{info.version}, model #{model.name} (#{model.architecture}, " \
       "#{model.max_context_tokens} context tokens), backend #{info.backend} on #{info.device}, " \
       "kv codec #{info.kv_codec}"
end

def main(argv)
  abort('usage: ARBI_ADMIN_TOKEN=... ruby example.rb HOST:PORT') unless argv.length == 1
  admin_token = ENV.fetch('ARBI_ADMIN_TOKEN', '')
  if admin_token.empty?
    abort('error: ARBI_ADMIN_TOKEN is not set (the server mints it into the admin-token file of its cache directory)')
  end
  target = argv.fetch(0)
  stream_chat(Arbi::V1::GenerateService::Stub.new(target, :this_channel_is_insecure),
              ENV.fetch('ARBI_GENERATE_TOKEN', ''))
  print_server_info(Arbi::V1::AdminService::Stub.new(target, :this_channel_is_insecure), admin_token)
rescue GRPC::BadStatus => e
  abort("error: #{e.class.name.split('::').last} (code #{e.code}): #{e.details}")
end

main(ARGV)
