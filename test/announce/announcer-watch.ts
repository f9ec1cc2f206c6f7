// A watch of one Service's announcer that fails a test at the first event showing another (or none): raced against
// the wait that ends an observation window, so that a move fails the test on that event, not on a read at its end.
import type { Service } from "kubernetes-types/core/v1.js";
import { Informer } from "../../src/kube/informer.ts";
import type { Resource } from "../../src/kube/resource.ts";
import { ANNOUNCER_ANNOTATION } from "../../src/pools/announcement.ts";

export interface AnnouncerWatch {
  /** Rejects at the first event that shows an announcer other than the expected one. */
  moved: Promise<never>;
  stop(): void;
}

export async function watchAnnouncer(services: Resource<Service>, name: string, expected: string): Promise<AnnouncerWatch> {
  let fail: (err: Error) => void = () => {};
  const moved = new Promise<never>((_, reject) => (fail = reject));
  moved.catch(() => {}); // raced by the caller; a rejection before the race is not unhandled
  const informer = new Informer(services, { fieldSelector: `metadata.name=${name}` });
  const check = (service: Service) => {
    const node = service.metadata?.annotations?.[ANNOUNCER_ANNOTATION];
    const version = service.metadata?.resourceVersion;
    if (node !== expected) fail(new Error(`the announcer moved from ${expected} to ${node} (version ${version})`));
  };
  informer.addHandlers({
    onAdd: check,
    onUpdate: (_, service) => check(service),
    onDelete: () => fail(new Error(`${name} was deleted`)),
  });
  informer.start();
  await informer.waitForSync();
  return { moved, stop: () => informer.stop() };
}
