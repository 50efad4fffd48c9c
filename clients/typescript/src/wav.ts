// Mono 16-bit PCM WAV files: reading one into raw samples and writing raw samples as one.

/** Raw signed 16-bit little-endian mono samples and their rate. */
export interface Pcm16 {
  samples: Buffer;
  sampleRateHz: number;
}

const WAVE_FORMAT_PCM = 1;
const HEADER_BYTES = 44;

/** The samples of a RIFF/WAVE file of mono 16-bit PCM; throws an Error that says what the file is instead. */
export function readWav(bytes: Buffer): Pcm16 {
  if (bytes.length < 12 || bytes.toString("ascii", 0, 4) !== "RIFF" || bytes.toString("ascii", 8, 12) !== "WAVE") {
    throw new Error("not a RIFF/WAVE file");
  }
  let sampleRateHz = 0;
  // Chunks follow the 12-byte RIFF header; each is padded to an even size.
  for (let offset = 12; offset + 8 <= bytes.length; ) {
    const id = bytes.toString("ascii", offset, offset + 4);
    const body = offset + 8;
    const size = Math.min(bytes.readUInt32LE(offset + 4), bytes.length - body);
    if (id === "fmt ") {
      const format = bytes.readUInt16LE(body);
      const channels = bytes.readUInt16LE(body + 2);
      const bitsPerSample = bytes.readUInt16LE(body + 14);
      if (format !== WAVE_FORMAT_PCM || channels !== 1 || bitsPerSample !== 16) {
        throw new Error(`need mono 16-bit PCM; the file has format ${format}, ${channels} channels, ${bitsPerSample} bits`);
      }
      sampleRateHz = bytes.readUInt32LE(body + 4);
    } else if (id === "data") {
      if (sampleRateHz === 0) {
        throw new Error("the data chunk comes before the fmt chunk");
      }
      return { samples: bytes.subarray(body, body + size - (size % 2)), sampleRateHz };
    }
    offset = body + size + (size % 2);
  }
  throw new Error("no data chunk");
}

/** A WAV file holding `pcm`. */
export function wavBytes(pcm: Pcm16): Buffer {
  const header = Buffer.alloc(HEADER_BYTES);
  header.write("RIFF", 0, "ascii");
  header.writeUInt32LE(HEADER_BYTES - 8 + pcm.samples.length, 4);
  header.write("WAVEfmt ", 8, "ascii");
  header.writeUInt32LE(16, 16); // the fmt chunk's size
  header.writeUInt16LE(WAVE_FORMAT_PCM, 20);
  header.writeUInt16LE(1, 22); // channels
  header.writeUInt32LE(pcm.sampleRateHz, 24);
  header.writeUInt32LE(2 * pcm.sampleRateHz, 28); // bytes per second
  header.writeUInt16LE(2, 32); // bytes per frame
  header.writeUInt16LE(16, 34); // bits per sample
  header.write("data", 36, "ascii");
  header.writeUInt32LE(pcm.samples.length, 40);
  return Buffer.concat([header, pcm.samples]);
}
