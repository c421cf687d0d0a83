// Audio helpers for the voice view: WAV in (what transcription reads reliably, spec 9) and
// a player for the chunked WAV stream of POST /v1/audio/speech (spec 10).

// 16-bit PCM mono WAV from float samples in [-1, 1].
export function wavBlob(samples, rate) {
  const buf = new ArrayBuffer(44 + samples.length * 2);
  const v = new DataView(buf);
  const ascii = (at, s) => [...s].forEach((c, i) => v.setUint8(at + i, c.charCodeAt(0)));
  ascii(0, "RIFF"); v.setUint32(4, 36 + samples.length * 2, true); ascii(8, "WAVE");
  ascii(12, "fmt "); v.setUint32(16, 16, true); v.setUint16(20, 1, true); v.setUint16(22, 1, true);
  v.setUint32(24, rate, true); v.setUint32(28, rate * 2, true); v.setUint16(32, 2, true);
  v.setUint16(34, 16, true); ascii(36, "data"); v.setUint32(40, samples.length * 2, true);
  for (let i = 0; i < samples.length; i++) {
    const s = Math.max(-1, Math.min(1, samples[i]));
    v.setInt16(44 + i * 2, s < 0 ? s * 0x8000 : s * 0x7fff, true);
  }
  return new Blob([buf], { type: "audio/wav" });
}

// A recording in whatever container MediaRecorder made, as 16 kHz mono WAV; the original
// blob when the browser cannot decode it (the server's decoder may still read it).
export async function toWav(blob) {
  const RATE = 16000;
  try {
    const decoded = await new AudioContext().decodeAudioData(await blob.arrayBuffer());
    const frames = Math.ceil(decoded.duration * RATE);
    const offline = new OfflineAudioContext(1, Math.max(1, frames), RATE);
    const src = offline.createBufferSource();
    src.buffer = decoded;   // a mono destination downmixes the channels
    src.connect(offline.destination);
    src.start();
    const rendered = await offline.startRendering();
    return { blob: wavBlob(rendered.getChannelData(0), RATE), name: "recording.wav" };
  } catch {
    return { blob, name: "recording.webm" };
  }
}

// Parse a WAV header; null until the bytes up to the "data" chunk have arrived.
function wavHeader(bytes) {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.length < 12) return null;
  let at = 12;
  let rate = 24000;
  while (at + 8 <= bytes.length) {
    const id = String.fromCharCode(...bytes.subarray(at, at + 4));
    const size = v.getUint32(at + 4, true);
    if (id === "fmt " && at + 16 <= bytes.length) rate = v.getUint32(at + 12, true);
    if (id === "data") return { rate, dataAt: at + 8 };
    at += 8 + size;
  }
  return null;
}

// Plays a streamed WAV body chunk by chunk as it arrives (the header declares an open-ended
// length), and keeps the samples so the whole answer can be replayed afterwards.
export class StreamPlayer {
  constructor(audioContext) {
    this.ctx = audioContext;
    this.pending = new Uint8Array(0);
    this.header = null;
    this.at = 0;            // when the next chunk starts, in the context's clock
    this.parts = [];
    this.samples = 0;
  }

  push(chunk) {
    const joined = new Uint8Array(this.pending.length + chunk.length);
    joined.set(this.pending);
    joined.set(chunk, this.pending.length);
    let data = joined;
    if (!this.header) {
      this.header = wavHeader(joined);
      if (!this.header) { this.pending = joined; return; }
      data = joined.subarray(this.header.dataAt);
    }
    const even = data.length - (data.length % 2);   // a sample may straddle two chunks
    this.pending = data.slice(even);
    if (!even) return;
    const pcm = new Int16Array(data.slice(0, even).buffer);
    const floats = Float32Array.from(pcm, (s) => s / 0x8000);
    this.parts.push(floats);
    this.samples += floats.length;
    const buffer = this.ctx.createBuffer(1, floats.length, this.header.rate);
    buffer.copyToChannel(floats, 0);
    const src = this.ctx.createBufferSource();
    src.buffer = buffer;
    src.connect(this.ctx.destination);
    this.at = Math.max(this.at, this.ctx.currentTime + 0.05);
    src.start(this.at);
    this.at += buffer.duration;
  }

  get seconds() {
    return this.header ? this.samples / this.header.rate : 0;
  }

  // Everything received, as one WAV for an <audio> element.
  wav() {
    const all = new Float32Array(this.samples);
    let at = 0;
    for (const p of this.parts) { all.set(p, at); at += p.length; }
    return wavBlob(all, this.header ? this.header.rate : 24000);
  }
}
