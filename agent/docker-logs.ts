import type { JobLog } from './job-log.js';

const HEADER_BYTES = 8;

/**
 * Reads the multiplexed log stream of a container started without a TTY, as the Engine API sends
 * it with `timestamps=true`: frames of [stream, 0, 0, 0, size (u32 BE)] then "<RFC 3339 time> <text>".
 */
export class DockerLogReader {
  private buffered: Buffer = Buffer.alloc(0);
  /** The second of the last frame read (whole seconds since the epoch), and how many frames of that second were read. */
  private lastSecond = 0;
  private framesInLastSecond = 0;

  constructor(private readonly log: JobLog) {}

  push(chunk: Buffer): void {
    this.buffered = this.readFrames(this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk]), 0);
  }

  /**
   * Where to read the log again from (`since`, in seconds) to find what a follow stream missed: Podman's can end with
   * its container before the last lines reached it. Every frame from that second on comes again, and `catchUp` skips
   * those already read.
   */
  get resumeSince(): number {
    return this.lastSecond;
  }

  /** Takes the log read again from `resumeSince`: what the follow stream already gave is skipped, the rest is written. */
  catchUp(tail: Buffer): void {
    this.buffered = Buffer.alloc(0);
    this.readFrames(tail, this.framesInLastSecond);
  }

  /** Writes the whole frames of `data` after the first `skip`; returns the part of a frame left at its end. */
  private readFrames(data: Buffer, skip: number): Buffer {
    let rest = data;
    while (rest.length >= HEADER_BYTES) {
      const size = rest.readUInt32BE(4);
      if (rest.length < HEADER_BYTES + size) break;
      if (skip > 0) skip--;
      else this.frame(rest[0] === 2 ? 'stderr' : 'stdout', rest.subarray(HEADER_BYTES, HEADER_BYTES + size));
      rest = rest.subarray(HEADER_BYTES + size);
    }
    return Buffer.from(rest);
  }

  private frame(stream: 'stdout' | 'stderr', payload: Buffer): void {
    const space = payload.indexOf(0x20);
    const stamp = space > 0 ? new Date(payload.toString('latin1', 0, space)) : null;
    if (stamp && !Number.isNaN(stamp.getTime())) {
      this.counted(Math.floor(stamp.getTime() / 1000));
      this.log.write(stream, payload.subarray(space + 1), stamp.toISOString());
    } else {
      this.counted(this.lastSecond);
      this.log.write(stream, payload);
    }
  }

  /** A frame stamped before the last second is not counted: reading again from that second leaves it out. */
  private counted(second: number): void {
    if (second === this.lastSecond) this.framesInLastSecond++;
    else if (second > this.lastSecond) {
      this.lastSecond = second;
      this.framesInLastSecond = 1;
    }
  }
}
