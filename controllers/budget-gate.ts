import { budgetSpentReason } from '../api/costs.js';
import type { OfferListing } from '../api/offer.js';
import { offerSatisfies, type ResourceRequirement } from '../api/resources.js';
import { getBudget, liveInstancePrices, spentThisPeriod } from '../store/budgets.js';
import type { Queryable } from '../store/db.js';

export interface NewInstance {
  fleetId: string;
  requirement: ResourceRequirement;
}

/** Every instance of the project counts at its price for this long ahead: what it spends before anyone could stop it. */
const COMMITTED_HOURS = 1 / 60;

/**
 * The scheduler's check of a project's budget (on_exceed stop_new or stop_all) before it places runs on new instances:
 * what is spent this period plus a minute of every instance the project has (starting ones too, at the price of the offer
 * they will take) must stay under the amount. Runs placed in one pass commit their instances' minutes in turn, so runs
 * applied together overrun the budget by one instance-minute at most.
 */
export class BudgetGate {
  private constructor(
    private readonly budget: { amount: number; period: 'day' | 'week' | 'month' },
    private readonly spent: number,
    private committed: number,
    private readonly end: Date,
    private readonly offers: Map<string, OfferListing>,
  ) {}

  /** The gate of the project, or null when no budget holds back its new instances. `offers` are the listings by fleet id. */
  static async open(db: Queryable, projectId: string, offers: Map<string, OfferListing>, now = new Date()): Promise<BudgetGate | null> {
    const record = await getBudget(db, projectId);
    if (!record || record.budget.on_exceed === 'warn') return null;
    const { spent, end } = spentThisPeriod(record, now);
    const gate = new BudgetGate(record.budget, spent, 0, end, offers);
    for (const live of await liveInstancePrices(db, projectId)) gate.committed += (live.pricePerHour ?? gate.price(live)) * COMMITTED_HOURS;
    return gate;
  }

  /** Null when the new instances may start (their minute is then committed), else the queue reason. */
  admit(instances: NewInstance[]): string | null {
    if (instances.length === 0) return null;
    if (this.spent + this.committed >= this.budget.amount) return budgetSpentReason(this.budget, this.spent, this.committed, this.end);
    for (const instance of instances) this.committed += this.price(instance) * COMMITTED_HOURS;
    return null;
  }

  /** What the instance will cost per hour: the cheapest available offer of its fleet that fits it, as the instance controller takes. */
  private price(instance: NewInstance): number {
    const fitting = (this.offers.get(instance.fleetId)?.offers ?? []).filter((o) => o.availability === 'available' && offerSatisfies(o, instance.requirement));
    return fitting.length === 0 ? 0 : Math.min(...fitting.map((o) => o.pricePerHour));
  }
}
