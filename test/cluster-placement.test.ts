import { expect } from 'chai';
import type { Fleet, Instance } from '../api/objects.js';
import type { GpucloudCluster } from '../backends/gpucloud/api.js';
import { show } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { useGpucloudSuite, type GpucloudSuite } from './helpers/gpucloud-suite.js';
import { eventually } from './helpers/server.js';

/** A port for node 0 to listen on, away from those the other suites use. */
const MASTER_PORT = 20_000 + Math.floor(Math.random() * 10_000);

const CLUSTER_FLEET = 'type: fleet\nname: h100-cluster\nbackends: [gpucloud]\nnodes: 0..2\nplacement: cluster\nresources:\n  gpu: H100\n';

/** Node 0 serves on its internal address; node 1 reaches it there, as a training job's workers reach their master. */
const PAIR = [
  'type: task', 'name: pair', 'nodes: 2', 'fleets: [h100-cluster]', 'resources:', '  gpu: H100', 'commands:',
  '  - echo "ips=$(printf %s "$ORCHESTRATOR_NODES_IPS" | tr "\\n" ,) master=$ORCHESTRATOR_MASTER_NODE_IP"',
  `  - if [ "$ORCHESTRATOR_NODE_RANK" = 0 ]; then timeout 20 python3 -m http.server ${MASTER_PORT} --bind "$ORCHESTRATOR_MASTER_NODE_IP" >/dev/null 2>&1 & sleep 6; else sleep 2; python3 -c "import urllib.request; urllib.request.urlopen('http://$ORCHESTRATOR_MASTER_NODE_IP:${MASTER_PORT}/'); print('reached the master')"; fi`,
  '',
].join('\n');

for (const kind of DATABASE_KINDS) {
  describe(`placement: cluster on the gpucloud emulator (${kind})`, function () {
    this.timeout(90_000);
    let suite: GpucloudSuite;
    useGpucloudSuite(kind, (started) => { suite = started; });
    const clusters = async () => ((await (await fetch(`${suite.emulator.url}/clusters`, { headers: { authorization: `Bearer ${suite.emulator.apiKey}` } })).json()) as { clusters: GpucloudCluster[] }).clusters;

    it('places a multi-node task\'s instances in one cluster, and its nodes reach each other at the instances\' internal addresses', async () => {
      await suite.apply('h100-cluster', CLUSTER_FLEET);
      await suite.apply('pair', PAIR);
      const run = await suite.waitFor('pair', (r) => r.status === 'done' || r.status === 'failed', 'the 2-node task to finish', 60_000);
      const logs = await suite.cli(['logs', 'pair']);
      expect(run.status, show(logs)).to.equal('done');

      const [cluster] = await clusters();
      expect(cluster, 'one cluster for the fleet').to.include({ name: 'h100-cluster', gpu_model: 'H100', size: 2 });
      const cloud = await suite.cloudInstances();
      const byName = (name: string | null) => cloud.find((instance) => instance.name === name)!;
      const [first, second] = run.nodes!.map((node) => byName(node.instance));
      for (const instance of [first!, second!]) expect(instance).to.include({ cluster_id: cluster!.id, region: cluster!.region });
      expect(first!.internal_ip).to.match(/^127\.64\.\d+\.\d+$/).and.not.equal(second!.internal_ip);
      const ips = `${first!.internal_ip},${second!.internal_ip}`;
      expect(logs.stdout).to.contain(`[rank 0] ips=${ips} master=${first!.internal_ip}\n`);
      expect(logs.stdout).to.contain(`[rank 1] ips=${ips} master=${first!.internal_ip}\n`);
      expect(logs.stdout).to.contain('[rank 1] reached the master\n');
    });

    it('deletes the cluster with the fleet, once its instances are gone', async () => {
      const deleted = await suite.cli(['fleet', 'delete', 'h100-cluster', '-y']);
      expect(deleted.code, show(deleted)).to.equal(0);
      await eventually(async () => (await clusters()).length === 0, 30_000, 'the cluster to be deleted');
      // The fleet's event is written just after the cloud answers the deletion, so it may trail the listing a little.
      let events: string[] = [];
      await eventually(async () => {
        events = await suite.events('h100-cluster');
        return events.some((event) => /^ClusterDeleted: cluster c-[0-9a-f]+ deleted$/.test(event));
      }, 10_000, 'the ClusterDeleted event').catch((error: Error) => { throw new Error(`${error.message}\n${events.join('\n')}`); });
    });

    it('is refused by the cloud when it cannot fit in one region, and the fleet\'s instances say why', async () => {
      // The emulator holds 8 H200 machines, 4 in each region: 5 together fit in none.
      await suite.apply('h200-cluster', 'type: fleet\nname: h200-cluster\nbackends: [gpucloud]\nnodes: 5\nplacement: cluster\nresources:\n  gpu: H200\n');
      const why = 'placement: cluster: a cluster of 5 H200 machines does not fit in one region: us-east-1 holds at most 4';
      await eventually(async () => {
        const instances = (await suite.server.api('GET', '/api/projects/main/instances?all=true')).body as Instance[];
        return instances.some((instance) => instance.fleet === 'h200-cluster' && instance.terminationReason === 'no_capacity' && instance.statusMessage === why);
      }, 30_000, 'an instance of the fleet to end with the cloud\'s refusal');
      expect(await clusters()).to.deep.equal([]);
      expect((await suite.cloudInstances()).filter((instance) => instance.gpu.model === 'H200')).to.deep.equal([]);
      const fleet = (await suite.server.api('GET', '/api/projects/main/fleets/h200-cluster')).body as Fleet;
      expect(fleet.spec).to.include({ placement: 'cluster' });
    });
  });
}
