import type { GpuInfo } from '../../api/offer.js';
import type { SshHost } from '../../api/ssh-fleet.js';
import { BackendError } from '../backend.js';
import { gpuModelName, parseNvidiaSmiGpus } from '../local/machine.js';
import type { SshConnection } from './connection.js';

const MIB = 1024;
/** The agent and its Node runtime take about 110MB; the rest is for jobs' files and logs. */
export const MIN_FREE_DISK_MIB = 2048;
const ARCHITECTURES: Record<string, NodeJS.Architecture> = { x86_64: 'x64', amd64: 'x64', aarch64: 'arm64', arm64: 'arm64' };

/** Where the agent is installed on a host unless the host's environment (ORCHESTRATOR_HOST_DIR) says otherwise. */
export const HOST_DIR = '${ORCHESTRATOR_HOST_DIR:-$HOME/.orchestrator-host}';

/** One shell script, so that learning about a host costs one round trip. */
const PROBE = `
echo "os=$(uname -s)"
echo "arch=$(uname -m)"
if [ "$(id -u)" = 0 ]; then echo sudo=root; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then echo sudo=yes; else echo sudo=no; fi
echo "cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc)"
echo "memory_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)"
base="${HOST_DIR}"
echo "base=$base"
d="$base"; while [ ! -d "$d" ]; do d=$(dirname "$d"); done
echo "disk_free_kib=$(df -Pk "$d" | awk 'NR==2 {print $4}')"
command -v docker >/dev/null 2>&1 && echo docker=yes
command -v podman >/dev/null 2>&1 && echo podman=yes
[ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1 && echo systemd=yes
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits 2>/dev/null | sed 's/^/nvidia=/'
command -v amd-smi >/dev/null 2>&1 && echo "amd=$(amd-smi static --asic --vram --json 2>/dev/null | tr -d '\\n')"
command -v rocm-smi >/dev/null 2>&1 && echo "rocm=$(rocm-smi --showproductname --showmeminfo vram --json 2>/dev/null | tr -d '\\n')"
command -v ip >/dev/null 2>&1 && ip -o -4 addr show 2>/dev/null | awk '{print "address=" $4}'
true
`;

export interface HostFacts {
  arch: NodeJS.Architecture;
  /** Root, or a user that may sudo without a password. */
  privileged: 'root' | 'sudo';
  cpus: number;
  memoryMib: number;
  diskMib: number;
  gpu: GpuInfo;
  containers: 'docker' | 'podman' | null;
  systemd: boolean;
  /** The folder the agents of this host are installed under, with $HOME expanded. */
  baseDir: string;
  /** The address other hosts of the fleet reach this one at. */
  internalIp: string;
}

/** Learns what the host is and has, and (with `check`) refuses one the agent cannot run on, saying why. */
export async function probeHost(connection: SshConnection, host: SshHost, network: string | undefined, check = true): Promise<HostFacts> {
  const { code, stdout, stderr } = await connection.exec('sh -s', PROBE);
  if (code !== 0) throw new BackendError(`could not learn about ${host.name} (exit ${code}): ${stderr.trim()}`, true);
  const facts = parseProbe(stdout);
  const one = (key: string) => facts.get(key)?.[0] ?? '';
  const refuse = (why: string) => {
    if (check) throw new BackendError(`${host.name}: ${why}`, false);
  };
  if (one('os') !== 'Linux') refuse(`the agent runs on Linux; this host is ${one('os') || 'unknown'}`);
  const arch = ARCHITECTURES[one('arch')];
  if (!arch) refuse(`the agent runs on x86_64 or aarch64; this host is ${one('arch')}`);
  if (one('sudo') === 'no') refuse(`user ${host.user} is not root and cannot sudo without a password; give it passwordless sudo or log in as root`);
  const diskMib = Math.floor(Number(one('disk_free_kib')) / MIB);
  if (!(diskMib >= MIN_FREE_DISK_MIB)) refuse(`only ${diskMib}MB free under ${one('base')}; the agent needs at least ${MIN_FREE_DISK_MIB}MB`);
  const nvidia = parseNvidiaSmiGpus((facts.get('nvidia') ?? []).join('\n'));
  return {
    arch: arch ?? 'x64',
    privileged: one('sudo') === 'root' ? 'root' : 'sudo',
    cpus: Math.max(1, Number(one('cpus')) || 1),
    memoryMib: Math.floor(Number(one('memory_kib')) / MIB) || 0,
    diskMib,
    gpu: [nvidia, parseAmdSmiGpus(one('amd')), parseRocmSmiGpus(one('rocm'))].find((found) => found.count > 0) ?? nvidia,
    containers: facts.has('docker') ? 'docker' : facts.has('podman') ? 'podman' : null,
    systemd: facts.has('systemd'),
    baseDir: one('base'),
    internalIp: host.internalIp ?? addressIn(facts.get('address') ?? [], network) ?? host.hostname,
  };
}

function parseProbe(stdout: string): Map<string, string[]> {
  const facts = new Map<string, string[]>();
  for (const line of stdout.split('\n')) {
    const equals = line.indexOf('=');
    if (equals <= 0) continue;
    const key = line.slice(0, equals);
    facts.set(key, [...facts.get(key) ?? [], line.slice(equals + 1)]);
  }
  return facts;
}

const NO_GPU: GpuInfo = { name: '', memoryMib: 0, count: 0 };

/** `AMD Instinct MI300X` is the catalogue's MI300X. */
function amdModelName(marketName: string): string {
  return gpuModelName(marketName.replace(/^AMD\s+/i, '').replace(/^Instinct\s+/i, ''));
}

/** The host's AMD GPUs, taken to be alike: the first card's model, the smallest memory. */
function amdGpus(cards: { name: string; memoryMib: number }[]): GpuInfo {
  const found = cards.filter((card) => card.name);
  if (found.length === 0) return NO_GPU;
  return { name: found[0]!.name, memoryMib: Math.min(...found.map((card) => card.memoryMib)), count: found.length };
}

function parseJson(json: string): unknown {
  try {
    return JSON.parse(json);
  } catch {
    return null;
  }
}

/**
 * `amd-smi static --asic --vram --json`: a list of cards (ROCm 6), or the list under gpu_data (ROCm 7), each with
 * asic.market_name and vram.size in MB.
 */
export function parseAmdSmiGpus(json: string): GpuInfo {
  const parsed = parseJson(json) as { gpu_data?: unknown } | unknown[] | null;
  const cards = Array.isArray(parsed) ? parsed : Array.isArray(parsed?.gpu_data) ? parsed.gpu_data : [];
  return amdGpus((cards as { asic?: { market_name?: string }; vram?: { size?: { value?: number } } }[]).map((card) => ({
    name: amdModelName(card.asic?.market_name ?? ''),
    memoryMib: Number(card.vram?.size?.value ?? 0),
  })));
}

/** `rocm-smi --showproductname --showmeminfo vram --json`: one entry per card, with its series and VRAM in bytes. */
export function parseRocmSmiGpus(json: string): GpuInfo {
  const cards = (parseJson(json) ?? {}) as Record<string, Record<string, string>>;
  return amdGpus(Object.entries(cards).filter(([key]) => key.startsWith('card')).map(([, card]) => ({
    name: amdModelName(card['Card Series'] ?? card['Card series'] ?? ''),
    memoryMib: Math.floor(Number(card['VRAM Total Memory (B)'] ?? 0) / (MIB * MIB)),
  })));
}

/** The host's address within `network` (`10.0.0.0/24`), from `ip -o -4 addr`'s `10.0.0.5/24` forms. */
function addressIn(addresses: readonly string[], network: string | undefined): string | null {
  if (!network) return null;
  const [base, bits] = network.split('/');
  const mask = Number(bits) === 0 ? 0 : (~0 << (32 - Number(bits))) >>> 0;
  const number = (ip: string) => ip.split('.').reduce((sum, part) => ((sum << 8) + Number(part)) >>> 0, 0);
  const found = addresses.map((a) => a.split('/')[0]!).find((ip) => ((number(ip) & mask) >>> 0) === ((number(base!) & mask) >>> 0));
  return found ?? null;
}
