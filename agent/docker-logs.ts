import type { JobLog } from './job-log.js';

const HEADER_BYTES = 8;

/**
 * Reads the multiplexed log stream of a container started without a TTY, as the Engine API sends
 * it with `timestamps=true`: frames of [stream, 0, 0, 0, size (u32 BE)] then "<RFC 3339 time> <text>".
 */
export class DockerLogReader {
  private buffered = Buffer.alloc(0);

  constructor(private readonly log: JobLog) {}

  push(chunk: Buffer): void {
    let data = this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk]);
    while (data.length >= HEADER_BYTES) {
      const size = data.readUInt32BE(4);
      if (data.length < HEADER_BYTES + size) break;
      const stream = data[0] === 2 ? 'stderr' : 'stdout';
      this.frame(stream, data.subarray(HEADER_BYTES, HEADER_BYTES + size));
      data = data.subarray(HEADER_BYTES + size);
    }
    this.buffered = Buffer.from(data);
  }

  private frame(stream: 'stdout' | 'stderr', payload: Buffer): void {
    const space = payload.indexOf(0x20);
    const stamp = space > 0 ? new Date(payload.toString('latin1', 0, space)) : null;
    if (stamp && !Number.isNaN(stamp.getTime())) {
      this.log.write(stream, payload.subarray(space + 1), stamp.toISOString());
    } else {
      this.log.write(stream, payload);
    }
  }
}
