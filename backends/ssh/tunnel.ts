import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';

/** Opens a stream to the agent on its host (a channel of the SSH connection); throws when the agent cannot be reached. */
export type AgentDialer = () => Promise<NodeJS.ReadWriteStream>;

/**
 * A port on this server's loopback whose every connection is carried to the agent's port on the host's
 * loopback: the agent answers the server, and nobody else, without a port of the host being opened.
 */
export class AgentTunnel {
  private constructor(private readonly server: Server, readonly url: string) {}

  static async open(dial: AgentDialer): Promise<AgentTunnel> {
    const server = createServer((socket) => void carry(socket, dial));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    return new AgentTunnel(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  }

  close(): void {
    this.server.close();
  }
}

async function carry(socket: Socket, dial: AgentDialer): Promise<void> {
  socket.pause();
  let stream: NodeJS.ReadWriteStream;
  try {
    stream = await dial();
  } catch {
    socket.destroy();
    return;
  }
  socket.on('error', () => (stream as unknown as Socket).destroy?.());
  stream.on('error', () => socket.destroy());
  stream.on('close', () => socket.destroy());
  socket.on('close', () => (stream as unknown as Socket).destroy?.());
  socket.pipe(stream as NodeJS.WritableStream);
  stream.pipe(socket);
  socket.resume();
}
